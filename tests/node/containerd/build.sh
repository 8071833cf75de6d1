#!/usr/bin/env bash
# Build the test node's containerd and its runc shim (containerd-shim-runc-v2) at the version this
# module's go.mod pins, with tests/gotool-build.sh, into caches outside the repository (the version is
# stamped in, as a release build has it). Print the bin directory holding both (the shim's directory,
# with a link to containerd).
#
#   tests/node/containerd/build.sh     build if missing; print the bin directory
#
# NODETOPO_CONTAINERD_CACHE overrides the cache root (default ~/.cache/nodetopo).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="${NODETOPO_CONTAINERD_CACHE:-$HOME/.cache/nodetopo}"
version="$(awk '$1 == "github.com/containerd/containerd" { print $2 } $1 == "require" && $2 == "github.com/containerd/containerd" { print $3 }' "$here/go.mod")"
[ -n "$version" ] || { echo "build.sh: $here/go.mod requires no github.com/containerd/containerd" >&2; exit 1; }
stamp="-X github.com/containerd/containerd/version.Version=${version#v}"
daemon="$("$here/../../gotool-build.sh" "$here" containerd github.com/containerd/containerd/cmd/containerd "$root" "$stamp")"
shim="$("$here/../../gotool-build.sh" "$here" containerd-shim-runc-v2 \
  github.com/containerd/containerd/cmd/containerd-shim-runc-v2 "$root" "$stamp")"
ln -sfn "$daemon/containerd" "$shim/containerd"
echo "$shim"
