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

echo "== go test -race ./..."
go test -race -count=1 ./...

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
go test -tags e2e -count=1 -v ./test/e2e/...
