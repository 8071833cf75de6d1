#!/usr/bin/env bash
# Build kube-scheduler with the scheduler-plugins NodeResourceTopologyMatch plugin registered (main.go,
# sigs.k8s.io/scheduler-plugins at the version go.mod pins) with tests/gotool-build.sh into a cache
# outside the repository. Its own Go module: the control plane (tests/cluster) keeps its cache key. The
# replace block pins k8s.io/kubernetes and its staging modules to the control plane's version, so the Go
# build cache shares the compiled Kubernetes packages with tests/cluster/build.sh.
#
#   tests/cluster-nrt/build.sh     build if missing; print the bin directory
#
# NODETOPO_CLUSTER_CACHE overrides the cache root (default ~/.cache/nodetopo/cluster; the binary lands
# in <root>/kube-scheduler-nrt-<key>/bin).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The version the scheduler reports, as tests/cluster/build.sh stamps it: the replaced k8s.io/kubernetes.
k8s_version="$(awk '$1=="k8s.io/kubernetes" && $2=="=>"{print $4}' "$here/go.mod" | head -n1)"
minor="${k8s_version#v1.}"; minor="${minor%%.*}"
ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags="$ldflags -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done
exec "$here/../gotool-build.sh" "$here" kube-scheduler-nrt . \
  "${NODETOPO_CLUSTER_CACHE:-$HOME/.cache/nodetopo/cluster}" "${ldflags# }"
