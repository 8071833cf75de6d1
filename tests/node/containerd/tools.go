//go:build tools

// Package containerd pins the container runtime of the real test node: containerd and its runc shim,
// built from the official Go module (Debian 12's containerd 1.6 predates CDI, which DRA drivers hand
// their devices through). Nothing here is nodetopo code: the imports only make `go mod tidy` record
// every module the binaries need.
package containerd

import (
	_ "github.com/containerd/containerd/cmd/containerd"
	_ "github.com/containerd/containerd/cmd/containerd-shim-runc-v2"
)
