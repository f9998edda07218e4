//go:build tools

// Package tools pins the node binaries built from sigs.k8s.io/kind (tools/kind/build-node-bins.sh).
package tools

import (
	_ "sigs.k8s.io/kind"
)
