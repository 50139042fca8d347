// Package v1beta1 is the agents.x-k8s.io/v1beta1 API group as Zygo implements it: the Sandbox
// of kubernetes-sigs/agent-sandbox, with the same kind and field names where the meaning is the
// same, backed by a Zygo sandbox on one node instead of a pod (docs/kubernetes.md).
//
// +kubebuilder:object:generate=true
// +groupName=agents.x-k8s.io
package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is agents.x-k8s.io/v1beta1.
	GroupVersion = schema.GroupVersion{Group: "agents.x-k8s.io", Version: "v1beta1"}

	// SchemeBuilder registers this package's kinds.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds this package's kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// addKnownTypes registers this package's kinds under GroupVersion.
func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&Sandbox{}, &SandboxList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
