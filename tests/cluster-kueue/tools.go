//go:build tools

// Package tools pins the Kueue controller that tests/kube/test_kueue_e2e.py runs against the test
// control plane. Its own module, so that adding Kueue never changes the control plane's cache key.
package tools

import (
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
