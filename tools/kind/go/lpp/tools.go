//go:build tools

// Package tools pins the node binaries built from github.com/rancher/local-path-provisioner (tools/kind/build-node-bins.sh).
package tools

import (
	_ "github.com/rancher/local-path-provisioner"
)
