#!/usr/bin/env bash
# Build the test device plugin (this directory's main package) with tests/gotool-build.sh into a cache
# outside the repository (keyed by this module's go.mod, go.sum, Go sources and build script). Its own
# Go module: the control plane (tests/cluster) keeps its cache key.
#
#   tests/node/deviceplugin/build.sh     build if missing; print the bin directory
#
# NODETOPO_DEVICEPLUGIN_CACHE overrides the cache root (default ~/.cache/nodetopo; the binary lands
# in <root>/nodetopo-test-deviceplugin-<key>/bin/nodetopo-test-deviceplugin).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "$here/../../gotool-build.sh" "$here" nodetopo-test-deviceplugin . \
  "${NODETOPO_DEVICEPLUGIN_CACHE:-$HOME/.cache/nodetopo}"
