#!/usr/bin/env bash
# Build actionlint (github.com/rhysd/actionlint/cmd/actionlint, the version pinned in go.mod), the checker
# for .github/workflows/*.yml, with tests/gotool-build.sh into a cache outside the repository. Its own Go
# module: the control plane (tests/cluster) keeps its cache key.
#
#   tests/tools-actionlint/build.sh     build if missing; print the bin directory
#
# NODETOPO_CLUSTER_CACHE overrides the cache root (default ~/.cache/nodetopo/cluster).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "$here/../gotool-build.sh" "$here" actionlint github.com/rhysd/actionlint/cmd/actionlint \
  "${NODETOPO_CLUSTER_CACHE:-$HOME/.cache/nodetopo/cluster}"
