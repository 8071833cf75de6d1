#!/usr/bin/env bash
# Build the Helm CLI (helm.sh/helm/v3/cmd/helm, the version pinned in go.mod) into a cache outside the
# repository keyed by this module's go.mod, go.sum and this script. Its own Go module: the control
# plane (tests/cluster) keeps its cache key.
#
#   tests/cluster-helm/build.sh     build if missing; print the bin directory
#
# NODETOPO_HELM_CACHE overrides the cache root (default ~/.cache/nodetopo; the binary lands in
# <root>/helm-<version>-<key>/bin).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
version="$(awk '$1=="helm.sh/helm/v3"{print $2} $2=="helm.sh/helm/v3"{print $3}' go.mod | head -n1)"
key="$(cat go.mod go.sum build.sh | sha256sum | cut -c1-16)"
root="${NODETOPO_HELM_CACHE:-$HOME/.cache/nodetopo}"
bin="$root/helm-$version-$key/bin"
if [ -x "$bin/helm" ]; then echo "$bin"; exit 0; fi
command -v go >/dev/null || { echo "build.sh: Go is required to build helm" >&2; exit 1; }
mkdir -p "$bin.partial"
start=$(date +%s)
echo "build.sh: building helm $version (helm.sh/helm/v3/cmd/helm)" >&2
# As helm's own Makefile: the default Kubernetes version (`helm template`, `helm lint`) follows the
# client-go that helm is built with (v0.X.Y -> 1.X).
client_go="$(awk '$1=="k8s.io/client-go"{print $2}' go.mod | head -n1)"
minor="${client_go#v0.}"; minor="${minor%%.*}"
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$version"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  ldflags="$ldflags -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$minor"
done
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin.partial/helm" helm.sh/helm/v3/cmd/helm
echo "build.sh: built helm in $(( $(date +%s) - start ))s" >&2
rm -rf "$bin"; mv "$bin.partial" "$bin"
echo "$bin"
