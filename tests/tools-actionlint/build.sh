#!/usr/bin/env bash
# Build actionlint (github.com/rhysd/actionlint/cmd/actionlint, the version pinned in go.mod), the checker
# for .github/workflows/*.yml, into a cache outside the repository keyed by this module's go.mod, go.sum
# and this script. Its own Go module: the control plane (tests/cluster) keeps its cache key.
#
#   tests/tools-actionlint/build.sh     build if missing; print the bin directory
#
# NODETOPO_CLUSTER_CACHE overrides the cache root (default ~/.cache/nodetopo/cluster).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
version="$(awk '$1=="github.com/rhysd/actionlint"{print $2} $2=="github.com/rhysd/actionlint"{print $3}' go.mod | head -n1)"
key="$(cat go.mod go.sum build.sh | sha256sum | cut -c1-16)"
root="${NODETOPO_CLUSTER_CACHE:-$HOME/.cache/nodetopo/cluster}"
bin="$root/actionlint-$version-$key/bin"
if [ -x "$bin/actionlint" ]; then echo "$bin"; exit 0; fi
command -v go >/dev/null || { echo "build.sh: Go is required to build actionlint" >&2; exit 1; }
mkdir -p "$bin.partial"
start=$(date +%s)
echo "build.sh: building actionlint $version (github.com/rhysd/actionlint/cmd/actionlint)" >&2
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin.partial/actionlint" github.com/rhysd/actionlint/cmd/actionlint
echo "build.sh: built actionlint in $(( $(date +%s) - start ))s" >&2
rm -rf "$bin"; mv "$bin.partial" "$bin"
echo "$bin"
