// Package v1alpha1 is the zygo.run/v1alpha1 API group: what the agent-sandbox API lacks and
// Zygo has. ZygoNode (one reachable node agent), Checkpoint (an image of a Sandbox, on the
// node that holds it), SandboxFork (one source, N resealed copies, a status per copy) and
// Function (a warm function served by some nodes behind the controller's route).
//
// +kubebuilder:object:generate=true
// +groupName=zygo.run
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is zygo.run/v1alpha1.
	GroupVersion = schema.GroupVersion{Group: "zygo.run", Version: "v1alpha1"}

	// SchemeBuilder registers this package's kinds.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds this package's kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// addKnownTypes registers this package's kinds under GroupVersion.
func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&ZygoNode{}, &ZygoNodeList{}, &Checkpoint{}, &CheckpointList{},
		&SandboxFork{}, &SandboxForkList{}, &Function{}, &FunctionList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
