//go:build tools

// Package tools pins the node binaries built from github.com/coredns/coredns (tools/kind/build-node-bins.sh).
package tools

import (
	_ "github.com/coredns/coredns"
)
