#!/usr/bin/env bash
# Build the KubeRay operator (github.com/ray-project/kuberay/ray-operator, the version pinned in
# go.mod) with tests/gotool-build.sh into a cache outside the repository. Its own Go module: the
# control plane (tests/cluster) and Kueue (tests/cluster-kueue) keep their cache keys.
#
#   tests/cluster-kuberay/build.sh     build if missing; print the bin directory
#
# NODETOPO_CLUSTER_CACHE overrides the cache root (default ~/.cache/nodetopo/cluster).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "$here/../gotool-build.sh" "$here" kuberay-operator github.com/ray-project/kuberay/ray-operator \
  "${NODETOPO_CLUSTER_CACHE:-$HOME/.cache/nodetopo/cluster}"
