package v1beta1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types and reasons of a Sandbox (and of the claims and forks that make them).
const (
	// ConditionReady is True once the sandbox runs on its node and has been resealed.
	ConditionReady = "Ready"

	ReasonRunning          = "SandboxRunning"   // Ready=True
	ReasonCreating         = "Creating"         // Ready=False: the create call is under way
	ReasonNoReadyNode      = "NoReadyNode"      // no ZygoNode is Ready (or the pinned one is not)
	ReasonNodeUnreachable  = "NodeUnreachable"  // the node agent did not answer the create
	ReasonNodeLost         = "NodeLost"         // the sandbox's node stopped answering: its memory is gone with it
	ReasonCreateFailed     = "CreateFailed"     // the agent refused or failed the create; the message is its error
	ReasonSandboxGone      = "SandboxGone"      // the agent no longer has the sandbox (removed outside Kubernetes, or dead)
	ReasonSecretNotFound   = "SecretNotFound"   // a spec.zygo.secrets entry names a missing Secret or key
	ReasonExpired          = "SandboxExpired"   // shutdownTime passed: the Zygo sandbox was removed
	ReasonInvalidSpec      = "InvalidSpec"      // what the schema could not check (the agent's 400, verbatim)
	ReasonAgentUnavailable = "AgentUnavailable" // the agent answered 503 (sandboxes disabled, draining)
	// ReasonAccessSecretFailed: the sandbox runs, but its access Secret
	// (status.zygo.accessSecretName) could not be written: the agent did not mint the token, or
	// a Secret of that name exists that is not this Sandbox's. The message says which.
	ReasonAccessSecretFailed = "AccessSecretFailed"
	// ReasonSandboxNotOwned: status.zygo.sandboxID names a sandbox on the node that is not
	// this Sandbox's (its name on the node is not k8s-UID of this object): the status was
	// written by someone else. Nothing is minted, recorded or removed for it.
	ReasonSandboxNotOwned = "SandboxNotOwned"
)

// Annotations with which the controller adopts a Zygo sandbox that already exists on a node
// (a fork child, a claim's fork of a warm sandbox) instead of creating one.
const (
	// AnnotationNode names the ZygoNode holding the sandbox.
	AnnotationNode = "zygo.run/node"
	// AnnotationSandboxID is the Zygo sandbox id ("sb-" + 16 hex digits) on that node.
	AnnotationSandboxID = "zygo.run/sandbox-id"
)

// EnvVar is one environment variable of every process in the sandbox.
type EnvVar struct {
	// name of the variable.
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	// +kubebuilder:validation:MaxLength=255
	// +required
	Name string `json:"name"`
	// value of the variable.
	// +optional
	Value string `json:"value"`
}

// SecretKeySelector names one key of a Kubernetes Secret in the object's namespace.
type SecretKeySelector struct {
	// name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +required
	Name string `json:"name"`
	// key in the Secret's data.
	// +kubebuilder:validation:MinLength=1
	// +required
	Key string `json:"key"`
}

// SecretFile is a Kubernetes Secret's key delivered as a Zygo secret: the controller stores
// its value in each node agent's secret store and names it there (a sandbox's create
// secrets, a function's manifest secrets), and the agent writes it as a file on tmpfs (mode
// 0400): into a sandbox at create and again into every fork child and rollback, for a
// function into each request's /run/secrets. The file is /run/secrets/k8s<the first 128
// bits of the sha256 of "NAMESPACE/SECRET/KEY" in base 62, 22 characters>_NAME
// (controller.NodeSecretName; secret names are per node: two namespaces, or two objects
// naming different Secrets NAME, must never share one).
type SecretFile struct {
	// name the secret has inside the sandbox.
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]{0,100}$`
	// +required
	Name string `json:"name"`
	// secretKeyRef is where its value comes from.
	// +required
	SecretKeyRef SecretKeySelector `json:"secretKeyRef"`
}

// Service is a long-lived process the sandbox starts at boot.
type Service struct {
	// name of the service, unique in the sandbox.
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9-]{0,62}$`
	// +required
	Name string `json:"name"`
	// argv is its command line.
	// +kubebuilder:validation:MinItems=1
	// +required
	Argv []string `json:"argv"`
	// onFork is what a fork or rollback does to it: restart, signal or keep (the default).
	// +kubebuilder:validation:Enum=restart;signal;keep
	// +optional
	OnFork string `json:"onFork,omitempty"`
}

// Limits bound a sandbox. An absent limit is the node agent's default.
type Limits struct {
	// memory bounds its processes and its in-memory root together (at least 64Mi).
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`
	// cpu is a CPU quota (1500m = one and a half cores).
	// +optional
	CPU *resource.Quantity `json:"cpu,omitempty"`
	// pids bounds the processes and threads alive at once inside.
	// +kubebuilder:validation:Minimum=32
	// +optional
	PIDs *int32 `json:"pids,omitempty"`
}

// Network is the sandbox's network.
type Network struct {
	// mode is egress (an interface of its own, NAT to the outside) or none (loopback only).
	// +kubebuilder:validation:Enum=egress;none
	// +optional
	Mode string `json:"mode,omitempty"`
	// allow, when not empty, are the only IPv4 CIDRs it may reach.
	// +optional
	// +listType=atomic
	Allow []string `json:"allow,omitempty"`
	// deny are IPv4 CIDRs it may never reach, even inside allow.
	// +optional
	// +listType=atomic
	Deny []string `json:"deny,omitempty"`
}

// ZygoSandboxSpec is what a Zygo sandbox is made of. It stands where agent-sandbox has a
// podTemplate: a Zygo sandbox is a gVisor sandbox on a node agent, not a pod.
type ZygoSandboxSpec struct {
	// limits bound the sandbox.
	// +optional
	Limits Limits `json:"limits,omitempty"`
	// env is set for every exec and service.
	// +optional
	// +listType=map
	// +listMapKey=name
	Env []EnvVar `json:"env,omitempty"`
	// secrets are Kubernetes Secret keys delivered as files on tmpfs.
	// +optional
	// +listType=map
	// +listMapKey=name
	Secrets []SecretFile `json:"secrets,omitempty"`
	// services start at boot.
	// +optional
	// +listType=map
	// +listMapKey=name
	Services []Service `json:"services,omitempty"`
	// network is its network; absent: the node agent's default.
	// +optional
	Network *Network `json:"network,omitempty"`
}

// SandboxOperatingMode is the desired state of a Sandbox. Zygo implements Running only.
// +kubebuilder:validation:Enum=Running
type SandboxOperatingMode string

// SandboxOperatingModeRunning asks for a running sandbox.
const SandboxOperatingModeRunning SandboxOperatingMode = "Running"

// ShutdownPolicy is what happens to a Sandbox object when its shutdownTime passes.
// +kubebuilder:validation:Enum=Delete;Retain
type ShutdownPolicy string

const (
	// ShutdownPolicyDelete deletes the object once the Zygo sandbox is removed.
	ShutdownPolicyDelete ShutdownPolicy = "Delete"
	// ShutdownPolicyRetain keeps the object with Ready=False reason SandboxExpired.
	ShutdownPolicyRetain ShutdownPolicy = "Retain"
)

// Lifecycle is when and how a Sandbox shuts down.
type Lifecycle struct {
	// shutdownTime is when the Zygo sandbox is removed; absent: never.
	// +kubebuilder:validation:Format="date-time"
	// +optional
	ShutdownTime *metav1.Time `json:"shutdownTime,omitempty"`
	// shutdownPolicy is what happens to the object then.
	// +kubebuilder:default=Retain
	// +optional
	ShutdownPolicy *ShutdownPolicy `json:"shutdownPolicy,omitempty"`
}

// SandboxSpec is the desired state of a Sandbox.
type SandboxSpec struct {
	// zygo is the sandbox's make-up.
	// +optional
	Zygo ZygoSandboxSpec `json:"zygo,omitempty"`

	// Lifecycle is when the sandbox shuts down.
	// +optional
	Lifecycle `json:",inline"`

	// operatingMode is Running (the only mode Zygo implements).
	// +kubebuilder:default=Running
	// +optional
	OperatingMode SandboxOperatingMode `json:"operatingMode,omitempty"`

	// nodeName pins the sandbox to one ZygoNode; absent: the controller picks the Ready node
	// with the fewest sandboxes. Immutable once set.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="nodeName is immutable"
	// +kubebuilder:validation:MaxLength=253
	// +optional
	NodeName string `json:"nodeName,omitempty"`
}

// ZygoSandboxStatus is where a Sandbox's Zygo sandbox is, for clients that talk to it directly.
type ZygoSandboxStatus struct {
	// sandboxID is the Zygo sandbox id on the node.
	// +optional
	SandboxID string `json:"sandboxID,omitempty"`
	// agentAddress is the node agent's API address (HOST:PORT); exec, files and run-code go
	// there, never through the API server.
	// +optional
	AgentAddress string `json:"agentAddress,omitempty"`
	// generation is the clone-generation token (32 hex digits), new on every fork and rollback.
	// +optional
	Generation string `json:"generation,omitempty"`
	// parentID is the Zygo sandbox it was forked from.
	// +optional
	ParentID string `json:"parentID,omitempty"`
	// checkpointID is the checkpoint it was restored from.
	// +optional
	CheckpointID string `json:"checkpointID,omitempty"`
	// warmCheckpointID, on a warm pool's source, is the image of it that claims fork from: the
	// controller took it and wrote it here (status is the controller's alone, so a tenant
	// cannot point claims at another sandbox's image). Empty until the source is warm.
	// +optional
	WarmCheckpointID string `json:"warmCheckpointID,omitempty"`
	// state is the agent's state of the sandbox (running, dead, ...).
	// +optional
	State string `json:"state,omitempty"`
	// accessSecretName is the Secret, in the Sandbox's namespace, that holds what a user of this
	// sandbox needs to reach it on its node agent: token (a bearer token for this sandbox
	// alone: its exec, files, run-code, ports; the agent refuses it everywhere else), address,
	// sandboxID, and ca.crt and serverName when the agent serves TLS. The controller writes it
	// once the sandbox runs and deletes it with the Sandbox (it is owned by the Sandbox); every
	// copy (SandboxFork, warm pool claim) gets its own. Never the node's token.
	// +optional
	AccessSecretName string `json:"accessSecretName,omitempty"`
}

// SandboxStatus is the observed state of a Sandbox; only the controller writes it.
type SandboxStatus struct {
	// conditions: Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// nodeName is the ZygoNode that holds the sandbox.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// podIPs are the sandbox's own addresses (empty without network).
	// +optional
	PodIPs []string `json:"podIPs,omitempty"`
	// zygo locates the sandbox on its node.
	// +optional
	Zygo ZygoSandboxStatus `json:"zygo,omitempty"`
}

// Sandbox is one Zygo sandbox on one node.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=sandbox
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type=='Ready')].status"
// +kubebuilder:printcolumn:name="Reason",type="string",JSONPath=".status.conditions[?(@.type=='Ready')].reason"
// +kubebuilder:printcolumn:name="Node",type="string",JSONPath=".status.nodeName"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
// +kubebuilder:storageversion
type Sandbox struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SandboxSpec   `json:"spec,omitempty"`
	Status SandboxStatus `json:"status,omitempty"`
}

// SandboxList is a list of Sandboxes.
//
// +kubebuilder:object:root=true
type SandboxList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Sandbox `json:"items"`
}
