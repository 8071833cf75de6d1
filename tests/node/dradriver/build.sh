#!/usr/bin/env bash
# Build the test DRA driver (this directory's main package, on k8s.io/dynamic-resource-allocation at the
# control plane's Kubernetes version) with tests/gotool-build.sh into a cache outside the repository
# (keyed by this module's go.mod, go.sum, Go sources and build script). Its own Go module: the control
# plane (tests/cluster) keeps its cache key.
#
#   tests/node/dradriver/build.sh     build if missing; print the bin directory
#
# NODETOPO_DRADRIVER_CACHE overrides the cache root (default ~/.cache/nodetopo; the binary lands in
# <root>/nodetopo-test-dradriver-<key>/bin/nodetopo-test-dradriver).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "$here/../../gotool-build.sh" "$here" nodetopo-test-dradriver . \
  "${NODETOPO_DRADRIVER_CACHE:-$HOME/.cache/nodetopo}"
