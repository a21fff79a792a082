//go:build tools

// Package tools pins helm, which the local cluster installs the operator's chart with
// (charts/valkey-operator) and `make manifests` renders the plain manifests from.
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
