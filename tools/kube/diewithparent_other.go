//go:build !linux

package main

// No parent-death signal outside Linux: the binaries are built and run on Linux only
// (scripts/kube-testenv.sh); this file lets the module build elsewhere.
