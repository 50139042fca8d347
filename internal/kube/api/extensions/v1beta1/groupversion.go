// Package v1beta1 is the extensions.agents.x-k8s.io/v1beta1 API group as Zygo implements it:
// SandboxTemplate, SandboxClaim and SandboxWarmPool of kubernetes-sigs/agent-sandbox, with the
// same kind and field names where the meaning is the same. A claim served from a warm pool is a
// fork of the pool's warm sandbox, resealed (docs/kubernetes.md).
//
// +kubebuilder:object:generate=true
// +groupName=extensions.agents.x-k8s.io
package v1beta1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is extensions.agents.x-k8s.io/v1beta1.
	GroupVersion = schema.GroupVersion{Group: "extensions.agents.x-k8s.io", Version: "v1beta1"}

	// SchemeBuilder registers this package's kinds.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds this package's kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
