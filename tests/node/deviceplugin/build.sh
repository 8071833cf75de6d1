#!/usr/bin/env bash
# Build the test device plugin (this directory's main package) into a cache outside the repository
# keyed by this module's go.mod, go.sum, its Go sources and this script. Its own Go module: the
# control plane (tests/cluster) keeps its cache key.
#
#   tests/node/deviceplugin/build.sh     build if missing; print the bin directory
#
# NODETOPO_DEVICEPLUGIN_CACHE overrides the cache root (default ~/.cache/nodetopo; the binary lands
# in <root>/deviceplugin-<key>/bin/nodetopo-test-deviceplugin).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
key="$(cat go.mod go.sum build.sh ./*.go | sha256sum | cut -c1-16)"
root="${NODETOPO_DEVICEPLUGIN_CACHE:-$HOME/.cache/nodetopo}"
bin="$root/deviceplugin-$key/bin"
if [ -x "$bin/nodetopo-test-deviceplugin" ]; then echo "$bin"; exit 0; fi
command -v go >/dev/null || { echo "build.sh: Go is required to build the test device plugin" >&2; exit 1; }
mkdir -p "$bin.partial"
start=$(date +%s)
echo "build.sh: building the test device plugin (k8s.io/kubelet device-plugin API v1beta1)" >&2
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin.partial/nodetopo-test-deviceplugin" .
echo "build.sh: built the test device plugin in $(( $(date +%s) - start ))s" >&2
rm -rf "$bin"; mv "$bin.partial" "$bin"
echo "$bin"
