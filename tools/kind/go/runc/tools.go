//go:build tools

// Package tools pins the node binaries built from github.com/opencontainers/runc (tools/kind/build-node-bins.sh).
package tools

import (
	_ "github.com/opencontainers/runc"
)
