//go:build tools

// Package tools pins actionlint, the GitHub Actions workflow checker, for tests/tools-actionlint/build.sh.
package tools

import _ "github.com/rhysd/actionlint/cmd/actionlint"
