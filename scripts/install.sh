#!/usr/bin/env bash
# Builds every agentscm binary from this checkout and installs them side by
# side into PREFIX/bin (default ~/.local/bin): agentscm, the two hook
# binaries the hooks run (agentscm-hook, agentscm-hook-intake) and agentdiff.
# All four carry one build stamp (`--version` prints it), so binaries of
# different builds can be told apart. Static (CGO_ENABLED=0): the hooks skip
# the dynamic loader at every start. Each binary is replaced by a rename, so
# a hook running during the install runs either the old or the new binary.
#
#   scripts/install.sh                  # into ~/.local/bin
#   scripts/install.sh --prefix /usr/local
#   PREFIX=/opt/agentscm scripts/install.sh
set -euo pipefail
cd "$(dirname "$0")/.."
prefix="${PREFIX:-$HOME/.local}"
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) [ $# -ge 2 ] || { echo "install.sh: --prefix needs a directory" >&2; exit 2; }; prefix="$2"; shift 2 ;;
    --prefix=*) prefix="${1#--prefix=}"; shift ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown argument $1 (want --prefix DIR)" >&2; exit 2 ;;
  esac
done
case "$prefix" in /*) ;; *) prefix="$PWD/$prefix" ;; esac
bin="$prefix/bin"
rev=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then rev="$rev-modified"; fi
stamp="$(date -u +%Y%m%dT%H%M%SZ)-$rev"
mkdir -p "$bin"
tmp=$(mktemp -d "$bin/.agentscm-install.XXXXXX") # beside the targets: the renames stay on one file system
trap 'rm -rf "$tmp"' EXIT
CGO_ENABLED=0 go build -buildvcs=false -ldflags "-X github.com/agentscm/agentscm/internal/buildinfo.Stamp=$stamp" \
  -o "$tmp/" ./cmd/agentscm ./cmd/agentscm-hook ./cmd/agentscm-hook-intake ./cmd/agentdiff
for b in agentscm agentscm-hook agentscm-hook-intake agentdiff; do
  mv -f "$tmp/$b" "$bin/$b"
done
echo "installed agentscm, agentscm-hook, agentscm-hook-intake and agentdiff (build $stamp) into $bin"
case ":$PATH:" in
  *":$bin:"*) ;;
  *) echo "$bin is not on your PATH; add it, for example: export PATH=\"$bin:\$PATH\"" ;;
esac
