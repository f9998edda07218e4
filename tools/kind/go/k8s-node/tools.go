//go:build tools

// Package tools pins the node-only Kubernetes commands (kubelet, kubeadm, kube-proxy) at the
// same k8s.io/kubernetes version and replaces as tools/k8s/go.mod, so every shared package
// resolves to the same module version and Go's build cache serves both builds.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kubeadm"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
