// Package v1alpha1 is the zygo.run/v1alpha1 API group: what the agent-sandbox API lacks and
// Zygo has. ZygoNode (one reachable node agent), Checkpoint (an image of a Sandbox, on the
// node that holds it), SandboxFork (one source, N resealed copies, a status per copy) and
// Function (a warm function served by some nodes behind the controller's route).
//
// +kubebuilder:object:generate=true
// +groupName=zygo.run
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is zygo.run/v1alpha1.
	GroupVersion = schema.GroupVersion{Group: "zygo.run", Version: "v1alpha1"}

	// SchemeBuilder registers this package's kinds.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds this package's kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
