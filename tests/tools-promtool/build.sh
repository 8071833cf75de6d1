#!/usr/bin/env bash
# Build promtool (github.com/prometheus/prometheus/cmd/promtool, the version pinned in go.mod): the rule
# checker, rule unit tester and query engine of the runtime-acceptance tests (deploy/monitoring/), with
# tests/gotool-build.sh into a cache outside the repository. Its own Go module: the control plane
# (tests/cluster) keeps its cache key. Built without Prometheus' service-discovery plugins
# (-tags remove_all_sd): promtool's rule and query commands need none, and they are most of the build.
#
#   tests/tools-promtool/build.sh     build if missing; print the bin directory
#
# NODETOPO_CLUSTER_CACHE overrides the cache root (default ~/.cache/nodetopo/cluster).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="$(awk '$1=="require" && $2=="github.com/prometheus/prometheus" {print $3}' "$here/go.mod")"
# The Go module's v0.3MM.P is Prometheus 3.MM.P (v0.315.1: 3.15.1): promtool --version says so.
rest="${version#v0.}"; series="${rest%%.*}"
release="$(( series / 100 )).$(( series % 100 )).${rest#*.}"
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-tags=remove_all_sd"
exec "$here/../gotool-build.sh" "$here" promtool github.com/prometheus/prometheus/cmd/promtool \
  "${NODETOPO_CLUSTER_CACHE:-$HOME/.cache/nodetopo/cluster}" \
  "-X github.com/prometheus/common/version.Version=$release"
