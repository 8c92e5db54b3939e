#!/bin/sh
# Changelog benchmarks on a generated 100,000-file git checkout, each against
# its reference in the same run (GNU tar --listed-incremental, git status,
# GNU tar --incremental extraction), plus the capture subjects interleaved
# call by call (BenchmarkCaptureInterleaved100k: the ratio to trust on a
# shared machine). Takes about 30 minutes on 2 cores.
#   bench/changelog.sh [count]   (default 5)
set -eu
cd "$(dirname "$0")/.."
AGENTSCM_BENCH_100K=1 exec go test -run '^$' -bench '100k' -benchtime 5x -count "${1:-5}" -timeout 90m ./internal/changelog/
