//go:build tools

// Package tools pins the node binaries built from github.com/containerd/containerd/v2 (tools/kind/build-node-bins.sh).
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
