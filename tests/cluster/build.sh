#!/usr/bin/env bash
# Build the real Kubernetes control plane (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, and kubelet for the real test node) and etcd from the
# official Go modules pinned in go.mod,
# into a cache outside the repository keyed by the pinned versions.
#
#   tests/cluster/build.sh          build if missing; print the bin directory
#
# NODETOPO_CLUSTER_CACHE overrides the cache root (default ~/.cache/nodetopo/cluster).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
k8s_version="$(awk '$1=="k8s.io/kubernetes"{print $2}' go.mod | head -n1)"
key="$(cat go.mod go.sum build.sh | sha256sum | cut -c1-16)"
root="${NODETOPO_CLUSTER_CACHE:-$HOME/.cache/nodetopo/cluster}"
bin="$root/$k8s_version-$key/bin"
targets=(
  "kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver"
  "kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager"
  "kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler"
  "kubectl=k8s.io/kubernetes/cmd/kubectl"
  "kubelet=k8s.io/kubernetes/cmd/kubelet"
  "etcd=go.etcd.io/etcd/server/v3"
)
missing=0
for t in "${targets[@]}"; do [ -x "$bin/${t%%=*}" ] || missing=1; done
if [ "$missing" = 0 ]; then echo "$bin"; exit 0; fi
command -v go >/dev/null || { echo "build.sh: Go is required to build the test control plane" >&2; exit 1; }
mkdir -p "$bin.partial"
minor="${k8s_version#v1.}"; minor="${minor%%.*}"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags="$ldflags -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done
for t in "${targets[@]}"; do
  name="${t%%=*}"; pkg="${t#*=}"
  [ -x "$bin.partial/$name" ] && continue
  start=$(date +%s)
  echo "build.sh: building $name ($pkg)" >&2
  CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin.partial/$name" "$pkg"
  echo "build.sh: built $name in $(( $(date +%s) - start ))s" >&2
done
rm -rf "$bin"; mv "$bin.partial" "$bin"
echo "$bin"
