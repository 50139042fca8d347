// Package v1beta1 is the extensions.agents.x-k8s.io/v1beta1 API group as Zygo implements it:
// SandboxTemplate, SandboxClaim and SandboxWarmPool of kubernetes-sigs/agent-sandbox, with the
// same kind and field names where the meaning is the same. A claim served from a warm pool is a
// fork of the pool's warm sandbox, resealed (docs/kubernetes.md).
//
// +kubebuilder:object:generate=true
// +groupName=extensions.agents.x-k8s.io
package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is extensions.agents.x-k8s.io/v1beta1.
	GroupVersion = schema.GroupVersion{Group: "extensions.agents.x-k8s.io", Version: "v1beta1"}

	// SchemeBuilder registers this package's kinds.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds this package's kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// addKnownTypes registers this package's kinds under GroupVersion.
func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&SandboxTemplate{}, &SandboxTemplateList{}, &SandboxClaim{}, &SandboxClaimList{},
		&SandboxWarmPool{}, &SandboxWarmPoolList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
