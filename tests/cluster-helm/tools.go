//go:build tools

// Package tools pins the Helm CLI (helm.sh/helm/v3/cmd/helm) that the chart tests run.
// Its own Go module so the control plane's cache key (tests/cluster) does not change.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
