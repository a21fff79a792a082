//go:build tools

// Package tools pins the Kubernetes control-plane commands that the local cluster builds.
// k8s.io/kubernetes replaces its staging modules with local paths, so this module replaces
// each one by its published v0.x.y (see go.mod) to make the commands buildable from the proxy.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
