#!/usr/bin/env bash
# Build one Go tool of the test suite from its own Go module (a directory of tests/ with go.mod, go.sum
# and a build.sh that names the tool and calls this script) into a cache outside the repository, keyed
# by that module's go.mod, go.sum, build.sh and *.go files and by this script. Print the bin directory.
#
#   tests/gotool-build.sh DIR NAME PACKAGE CACHE_ROOT [LDFLAGS]
#
# DIR      the module directory
# NAME     the binary's name
# PACKAGE  the main package to build: a required module's (the version go.mod requires of it names
#          the cache directory: <CACHE_ROOT>/<NAME>-<version>-<key>/bin/<NAME>), or "." for the module's
#          own (<CACHE_ROOT>/<NAME>-<key>/bin/<NAME>)
# LDFLAGS  more Go linker flags, after "-s -w"
#
# Each module keeps its own cache directory, so the control plane (tests/cluster, which has its own
# script) keeps its cache key.
set -euo pipefail
[ "$#" -ge 4 ] && [ "$#" -le 5 ] || { echo "usage: $0 DIR NAME PACKAGE CACHE_ROOT [LDFLAGS]" >&2; exit 2; }
dir="$(cd "$1" && pwd)"; name="$2"; package="$3"; root="$4"; ldflags="-s -w${5:+ $5}"
self="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
version=""  # "." (the module's own package): none
if [ "$package" != . ]; then
  # The longest required module path that is PACKAGE or a prefix of it (a require block's line or a
  # one-line `require`).
  version="$(awk -v pkg="$package" '
    $1 == "require" && NF >= 3 { m = $2; v = $3 } $1 != "require" && NF >= 2 { m = $1; v = $2 }
    (pkg == m || index(pkg, m "/") == 1) && length(m) > best { best = length(m); found = v }
    END { print found }' "$dir/go.mod")"
  [ -n "$version" ] || { echo "gotool-build.sh: $dir/go.mod requires no module holding $package" >&2; exit 1; }
fi
key="$(cat "$dir/go.mod" "$dir/go.sum" "$dir/build.sh" "$dir"/*.go "$self" | sha256sum | cut -c1-16)"
bin="$root/$name-${version:+$version-}$key/bin"
if [ -x "$bin/$name" ]; then echo "$bin"; exit 0; fi
command -v go >/dev/null || { echo "gotool-build.sh: Go is required to build $name" >&2; exit 1; }
mkdir -p "$bin.partial"
start=$(date +%s)
echo "gotool-build.sh: building $name${version:+ $version} ($package in $dir)" >&2
(cd "$dir" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin.partial/$name" "$package")
echo "gotool-build.sh: built $name in $(( $(date +%s) - start ))s" >&2
rm -rf "$bin"; mv "$bin.partial" "$bin"
echo "$bin"
