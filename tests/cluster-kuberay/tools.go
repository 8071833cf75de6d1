//go:build tools

// Package tools pins the KubeRay operator that tests/node/test_kuberay_node.py runs against the real
// node's control plane. Its own module, so that adding KubeRay never changes the control plane's (or
// Kueue's) cache key.
//
// go.mod holds the modules KubeRay shares with tests/cluster-kueue (k8s.io/api, client-go, apimachinery,
// apiserver, component-base, kube-openapi, otel, golang.org/x/...) at Kueue's versions, so that the
// packages compiled for Kueue earlier in the same run come from the Go build cache; only
// sigs.k8s.io/controller-runtime stays at KubeRay's own version (Kueue's changed the webhook builder
// KubeRay calls).
package tools

import (
	_ "github.com/ray-project/kuberay/ray-operator"
)
