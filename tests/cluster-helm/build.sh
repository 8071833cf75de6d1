#!/usr/bin/env bash
# Build the Helm CLI (helm.sh/helm/v3/cmd/helm, the version pinned in go.mod) with tests/gotool-build.sh
# into a cache outside the repository. Its own Go module: the control plane (tests/cluster) keeps its
# cache key.
#
#   tests/cluster-helm/build.sh     build if missing; print the bin directory
#
# NODETOPO_HELM_CACHE overrides the cache root (default ~/.cache/nodetopo; the binary lands in
# <root>/helm-<version>-<key>/bin).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# As helm's own Makefile: the version helm reports, and the default Kubernetes version (`helm template`,
# `helm lint`) follows the client-go that helm is built with (v0.X.Y -> 1.X).
version="$(awk '$1=="helm.sh/helm/v3"{print $2} $2=="helm.sh/helm/v3"{print $3}' "$here/go.mod" | head -n1)"
client_go="$(awk '$1=="k8s.io/client-go"{print $2}' "$here/go.mod" | head -n1)"
minor="${client_go#v0.}"; minor="${minor%%.*}"
ldflags="-X helm.sh/helm/v3/internal/version.version=$version"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  ldflags="$ldflags -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$minor"
done
exec "$here/../gotool-build.sh" "$here" helm helm.sh/helm/v3/cmd/helm \
  "${NODETOPO_HELM_CACHE:-$HOME/.cache/nodetopo}" "$ldflags"
