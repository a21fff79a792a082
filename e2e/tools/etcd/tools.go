//go:build tools

// Package tools pins etcd's server command (go.etcd.io/etcd/server/v3 is itself package main).
// It lives in its own module so etcd's and Kubernetes' dependency graphs never constrain each other.
package tools

import _ "go.etcd.io/etcd/server/v3"
