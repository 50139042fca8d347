package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1beta1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
)

// Condition reasons of a SandboxClaim (its condition is agentsv1beta1.ConditionReady).
const (
	ReasonTemplateNotFound = "TemplateNotFound" // spec.sandboxTemplateRef names no SandboxTemplate
	ReasonPoolNotFound     = "WarmPoolNotFound" // spec.warmpool names no SandboxWarmPool
	ReasonForkFailed       = "ForkFailed"       // the fork of the warm sandbox failed; the message is the agent's error
	ReasonSandboxNotReady  = "SandboxNotReady"  // the claim's Sandbox exists and is not Ready yet (its reason follows)
)

// LabelWarmPool marks a warm pool's source sandboxes with the pool's name.
const LabelWarmPool = "agents.x-k8s.io/warm-pool-sandbox"

// SandboxTemplateRef names a SandboxTemplate in the same namespace.
type SandboxTemplateRef struct {
	// name of the SandboxTemplate.
	// +kubebuilder:validation:MinLength=1
	// +required
	Name string `json:"name"`
}

// SandboxTemplateSpec is a blueprint for sandboxes made by claims and warm pools.
type SandboxTemplateSpec struct {
	// zygo is the make-up of every sandbox made from the template.
	// +optional
	Zygo agentsv1beta1.ZygoSandboxSpec `json:"zygo,omitempty"`
}

// SandboxTemplate is a blueprint for sandboxes.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,shortName=sandboxtemplate
// +kubebuilder:storageversion
type SandboxTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec SandboxTemplateSpec `json:"spec,omitempty"`
}

// SandboxTemplateList is a list of SandboxTemplates.
//
// +kubebuilder:object:root=true
type SandboxTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SandboxTemplate `json:"items"`
}

// WarmPoolPolicy is none (always a fresh sandbox), default (any pool of the template) or a
// pool's name.
// +kubebuilder:validation:MinLength=1
type WarmPoolPolicy string

const (
	// WarmPoolPolicyNone never uses a warm pool.
	WarmPoolPolicyNone WarmPoolPolicy = "none"
	// WarmPoolPolicyDefault uses any ready pool of the claim's template.
	WarmPoolPolicyDefault WarmPoolPolicy = "default"
)

// ClaimShutdownPolicy is what happens when a claim's shutdownTime passes.
// +kubebuilder:validation:Enum=Delete;Retain
type ClaimShutdownPolicy string

const (
	// ClaimShutdownPolicyDelete deletes the claim, and with it its Sandbox.
	ClaimShutdownPolicyDelete ClaimShutdownPolicy = "Delete"
	// ClaimShutdownPolicyRetain deletes the Sandbox and keeps the claim, Ready=False SandboxExpired.
	ClaimShutdownPolicyRetain ClaimShutdownPolicy = "Retain"
)

// ClaimLifecycle is when and how a claim shuts down.
type ClaimLifecycle struct {
	// shutdownTime is when the claim expires; absent: never.
	// +kubebuilder:validation:Format="date-time"
	// +optional
	ShutdownTime *metav1.Time `json:"shutdownTime,omitempty"`
	// shutdownPolicy is what happens then.
	// +kubebuilder:default=Retain
	// +optional
	ShutdownPolicy ClaimShutdownPolicy `json:"shutdownPolicy,omitempty"`
}

// SandboxClaimSpec asks for one sandbox from a template.
type SandboxClaimSpec struct {
	// sandboxTemplateRef names the template.
	// +required
	TemplateRef SandboxTemplateRef `json:"sandboxTemplateRef"`
	// lifecycle is when the claim shuts down.
	// +optional
	Lifecycle *ClaimLifecycle `json:"lifecycle,omitempty"`
	// warmpool says which warm pool may serve the claim. A claim that sets env always gets a
	// fresh sandbox (the environment of a running warm sandbox cannot change).
	// +kubebuilder:default=default
	// +optional
	WarmPool *WarmPoolPolicy `json:"warmpool,omitempty"`
	// env is added to the template's.
	// +optional
	// +listType=map
	// +listMapKey=name
	Env []agentsv1beta1.EnvVar `json:"env,omitempty"`
}

// ClaimedSandbox is the claim's Sandbox.
type ClaimedSandbox struct {
	// name of the Sandbox made for the claim.
	// +optional
	Name string `json:"name,omitempty"`
	// podIPs are the sandbox's addresses, as in its status.
	// +optional
	PodIPs []string `json:"podIPs,omitempty"`
	// launchType is warm (a fork of a warm pool's sandbox) or cold (a fresh create).
	// +optional
	LaunchType string `json:"launchType,omitempty"`
}

// SandboxClaimStatus is the observed state of a claim; only the controller writes it.
type SandboxClaimStatus struct {
	// conditions: Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// sandbox is the claim's Sandbox.
	// +optional
	SandboxStatus ClaimedSandbox `json:"sandbox,omitempty"`
}

// SandboxClaim asks for one sandbox from a template, from a warm pool when one is ready.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=sandboxclaim
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type=='Ready')].status"
// +kubebuilder:printcolumn:name="Reason",type="string",JSONPath=".status.conditions[?(@.type=='Ready')].reason"
// +kubebuilder:printcolumn:name="Sandbox",type="string",JSONPath=".status.sandbox.name"
// +kubebuilder:storageversion
type SandboxClaim struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SandboxClaimSpec   `json:"spec"`
	Status SandboxClaimStatus `json:"status,omitempty"`
}

// SandboxClaimList is a list of SandboxClaims.
//
// +kubebuilder:object:root=true
type SandboxClaimList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SandboxClaim `json:"items"`
}

// SandboxWarmPoolSpec is how many warm sources a template keeps.
type SandboxWarmPoolSpec struct {
	// replicas is the number of warm source sandboxes, each on its own node while there are
	// enough Ready nodes. A claim gets a resealed fork of one, never the source itself.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=64
	// +required
	Replicas int32 `json:"replicas"`
	// sandboxTemplateRef names the template of the sources.
	// +required
	TemplateRef SandboxTemplateRef `json:"sandboxTemplateRef"`
}

// SandboxWarmPoolStatus is the observed state of a pool; only the controller writes it.
type SandboxWarmPoolStatus struct {
	// conditions: Ready (every source runs and is checkpointed).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// replicas is the number of source sandboxes that exist.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// readyReplicas is the number of them that are Ready.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// selector selects the pool's source Sandboxes.
	// +optional
	Selector string `json:"selector,omitempty"`
}

// SandboxWarmPool keeps warm sandboxes of a template that claims fork.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:scope=Namespaced,shortName=swp
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:storageversion
type SandboxWarmPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SandboxWarmPoolSpec   `json:"spec"`
	Status SandboxWarmPoolStatus `json:"status,omitempty"`
}

// SandboxWarmPoolList is a list of SandboxWarmPools.
//
// +kubebuilder:object:root=true
type SandboxWarmPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SandboxWarmPool `json:"items"`
}
