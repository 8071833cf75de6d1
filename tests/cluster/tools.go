//go:build tools

// Package cluster pins the real Kubernetes control-plane binaries that the
// nodetopo test suite builds and starts. Nothing here is nodetopo code: the
// imports below only make `go mod tidy` record every module the binaries need.
package cluster

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
