//go:build tools

// Package tools pins promtool (Prometheus' rule checker, rule unit tester and query engine) for
// tests/tools-promtool/build.sh. Its own module: the control plane (tests/cluster) keeps its cache key.
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
