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

echo "== go test -race ./..."
go test -race -count=1 ./...

echo "== e2e (real Claude Code CLI)"
go test -tags e2e -count=1 -v ./test/e2e/...
