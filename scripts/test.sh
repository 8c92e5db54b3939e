#!/usr/bin/env bash
# The project's test command: formatting, vet, the race-enabled unit suite and
# the end-to-end suite that drives the real Claude Code CLI.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

echo "== go vet"
go vet ./...
go vet -tags e2e ./test/e2e/...

echo "== macOS cross-compile and vet (darwin/amd64, darwin/arm64)"
# Every package builds for macOS; per-OS system calls live in *_linux.go /
# *_darwin.go files. vet type-checks tests too, so it covers the builds.
for arch in amd64 arm64; do
  GOOS=darwin GOARCH=$arch go vet ./...
done
GOOS=darwin GOARCH=arm64 go vet -tags e2e ./test/e2e/...

echo "== PostgreSQL server binaries (the team Hub's store tests)"
# The PostgreSQL tests start a throwaway server from Debian's package
# (initdb into a temp dir, as user postgres when root, on 127.0.0.1 and a
# private socket, stopped at exit). Install it when missing; in CI it must
# be there, so those tests fail instead of skipping.
have_pg() { compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; }
if ! have_pg && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing postgresql-15"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends postgresql-15 >/dev/null || true
fi
if have_pg; then
  export AGENTSCM_REQUIRE_POSTGRES=1
elif [ "${CI:-}" = true ]; then
  echo "PostgreSQL server binaries are missing and could not be installed"; exit 1
else
  echo "PostgreSQL server binaries not found: the PostgreSQL tests will be skipped"
fi

echo "== Chromium (the pages' browser tests)"
# The Hub page and the local page are checked in Debian's headless Chromium
# (internal/browsertest). Install it when missing; in CI it must be there, so
# the browser tests fail instead of skipping.
have_chromium() { command -v chromium >/dev/null || command -v chromium-browser >/dev/null; }
if ! have_chromium && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing chromium"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends chromium >/dev/null || true
fi
if have_chromium; then
  export AGENTSCM_REQUIRE_CHROMIUM=1
elif [ "${CI:-}" = true ]; then
  echo "Chromium is missing and could not be installed"; exit 1
else
  echo "Chromium not found: the browser tests will be skipped"
fi

echo "== S3-compatible server (the team Hub's object-store tests)"
# versitygw serves a temporary directory over S3 on 127.0.0.1 for the whole
# run, stopped at exit. It is built outside the module (go.mod stays lean)
# into ~/.cache/agentscm-ci/bin when missing; in CI it must run, so the S3
# tests fail instead of skipping.
VERSITYGW_VERSION=v1.8.0
vgw_bin="${AGENTSCM_VERSITYGW:-$HOME/.cache/agentscm-ci/bin/versitygw}"
if [ ! -x "$vgw_bin" ] && [ -z "${AGENTSCM_VERSITYGW:-}" ]; then
  echo "building versitygw $VERSITYGW_VERSION into $(dirname "$vgw_bin")"
  vgw_build=$(mktemp -d)
  (cd "$vgw_build" && GOFLAGS=-buildvcs=false GOBIN="$(dirname "$vgw_bin")" go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION") || true
  rm -rf "$vgw_build"
fi
vgw_pid=""
vgw_dir=""
stop_vgw() {
  if [ -n "$vgw_pid" ]; then kill "$vgw_pid" 2>/dev/null || true; wait "$vgw_pid" 2>/dev/null || true; fi
  if [ -n "$vgw_dir" ]; then rm -rf "$vgw_dir"; fi
}
trap stop_vgw EXIT
if [ -x "$vgw_bin" ]; then
  vgw_dir=$(mktemp -d -t agentscm-s3-XXXXXX)
  mkdir -p "$vgw_dir/root"
  vgw_port=""
  for _ in $(seq 50); do # a free port: nothing answers on it
    p=$((20000 + RANDOM % 20000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then vgw_port=$p; break; fi
  done
  export AGENTSCM_S3_ACCESS_KEY=agentscm-ci AGENTSCM_S3_SECRET_KEY="ci-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
  ROOT_ACCESS_KEY="$AGENTSCM_S3_ACCESS_KEY" ROOT_SECRET_KEY="$AGENTSCM_S3_SECRET_KEY" \
    "$vgw_bin" --port "127.0.0.1:$vgw_port" --quiet posix "$vgw_dir/root" >"$vgw_dir/log" 2>&1 &
  vgw_pid=$!
  for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$vgw_port") 2>/dev/null; then break; fi
    sleep 0.1
  done
  if ! (exec 3<>"/dev/tcp/127.0.0.1/$vgw_port") 2>/dev/null; then
    echo "versitygw did not start:"; cat "$vgw_dir/log"; exit 1
  fi
  export AGENTSCM_S3_ENDPOINT="http://127.0.0.1:$vgw_port" AGENTSCM_VERSITYGW="$vgw_bin" AGENTSCM_REQUIRE_S3=1
  echo "versitygw on $AGENTSCM_S3_ENDPOINT"
elif [ "${CI:-}" = true ]; then
  echo "versitygw is missing and could not be built"; exit 1
else
  echo "versitygw not found: the S3 tests will be skipped"
fi

echo "== go test -race ./..."
go test -race -count=1 -timeout 20m ./...

echo "== agent CLIs for the e2e suite (pinned, into the e2e cache)"
# The harness installs them too when missing (test/e2e/harness_test.go,
# codex_test.go, gemini_test.go); installing here first keeps the npm
# output out of the test log. Versions match CodexVersion/GeminiVersion.
cache="${AGENTSCM_E2E_CACHE:-$HOME/.cache/agentscm-e2e}"
for pkg in "codex-0.169.0 @openai/codex@0.169.0 codex" "gemini-cli-0.61.0 @google/gemini-cli@0.61.0 gemini"; do
  set -- $pkg
  if [ ! -x "$cache/$1/node_modules/.bin/$3" ]; then
    echo "installing $2 into $cache/$1"
    mkdir -p "$cache/$1"
    npm install --no-audit --no-fund --prefix "$cache/$1" "$2" >/dev/null
  fi
done

echo "== e2e (real Claude Code, Codex and Gemini CLIs)"
go test -tags e2e -count=1 -timeout 30m -v ./test/e2e/...

# The whole e2e suite again with every `hub serve` replaced by two hub
# serve processes on one PostgreSQL database and one S3 bucket behind a
# loopback round-robin proxy (test/e2e/hubbackend_test.go).
if [ -n "${AGENTSCM_REQUIRE_POSTGRES:-}" ] && [ -n "${AGENTSCM_REQUIRE_S3:-}" ]; then
  echo "== e2e, every Hub two instances on PostgreSQL + S3 (AGENTSCM_E2E_HUB=pg-s3-2)"
  AGENTSCM_E2E_HUB=pg-s3-2 go test -tags e2e -count=1 -timeout 30m -v ./test/e2e/...
elif [ "${CI:-}" = true ]; then
  echo "the two-instance e2e pass needs PostgreSQL and versitygw"; exit 1
fi
