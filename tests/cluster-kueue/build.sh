#!/usr/bin/env bash
# Build the Kueue controller (sigs.k8s.io/kueue/cmd/kueue, the version pinned in go.mod) with
# tests/gotool-build.sh into a cache outside the repository. Its own Go module: the control plane
# (tests/cluster) keeps its cache key.
#
#   tests/cluster-kueue/build.sh     build if missing; print the bin directory
#
# NODETOPO_CLUSTER_CACHE overrides the cache root (default ~/.cache/nodetopo/cluster).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "$here/../gotool-build.sh" "$here" kueue sigs.k8s.io/kueue/cmd/kueue \
  "${NODETOPO_CLUSTER_CACHE:-$HOME/.cache/nodetopo/cluster}"
