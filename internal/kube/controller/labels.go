package controller

import (
	"crypto/sha256"
	"encoding/hex"
)

// maxLabelValue is the longest label value the API server accepts.
const maxLabelValue = 63

// NameLabel returns the label value that names the object called name (a Sandbox, a
// SandboxFork, a warm pool): name itself when it fits a label value (at most 63 characters),
// else "sha256_" and the first 56 hex digits of its SHA-256. Object names are DNS subdomains
// and never hold "_", so a hashed value cannot equal a real name. Every label of this
// package that carries an object's name goes through it; selectors too.
func NameLabel(name string) string {
	if len(name) <= maxLabelValue {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return "sha256_" + hex.EncodeToString(sum[:])[:maxLabelValue-len("sha256_")]
}
