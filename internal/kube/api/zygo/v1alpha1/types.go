package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1beta1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
)

// Condition types and reasons of the zygo.run kinds.
const (
	// ConditionReady: a ZygoNode answers; a Checkpoint's image exists; a Function serves on
	// spec.replicas nodes.
	ConditionReady = "Ready"
	// ConditionComplete: a SandboxFork's fork call is over (True even if some children failed;
	// False with a reason when it could not run at all).
	ConditionComplete = "Complete"

	ReasonAgentReady       = "AgentReady"
	ReasonDeleting         = "Deleting" // a ZygoNode being deleted that still holds what the controller placed
	ReasonAgentUnreachable = "AgentUnreachable"
	ReasonTokenMissing     = "TokenMissing"         // the token Secret or key is missing
	ReasonSourceNotFound   = "SourceNotFound"       // the Sandbox, Checkpoint or ConfigMap named does not exist
	ReasonSourceNotReady   = "SourceNotReady"       // it exists and is not Ready
	ReasonCrossNode        = "CrossNodeUnsupported" // a Checkpoint on another node than its Sandbox
	// ReasonCopying: a cross-node SandboxFork is copying the image to its node
	// (status.copiedFrom); ReasonCopyFailed: that copy failed (the message says why).
	ReasonCopying           = "Copying"
	ReasonCopyFailed        = "CopyFailed"
	ReasonSourceUnsupported = "SourceUnsupported" // a source of a kind not implemented (none today)
	ReasonSourceFailed      = "SourceFailed"      // the URL or OCI artifact could not be fetched, or did not match its digest
	ReasonForked            = "Forked"
	ReasonForkFailed        = "ForkFailed"
	ReasonCheckpointed      = "Checkpointed"
	ReasonCheckpointFailed  = "CheckpointFailed"
	ReasonDeployed          = "Deployed"
	ReasonDeployFailed      = "DeployFailed"
	ReasonNotEnoughNodes    = "NotEnoughNodes" // fewer Ready nodes than spec.replicas; it serves on those there are
	ReasonNodeLost          = "NodeLost"
	// ReasonInUse: a deleted Checkpoint's image is still used by sandboxes restored from it
	// (a fork's copies); the agent refuses to remove it, and the finalizer waits for them.
	ReasonInUse = "InUse"
	// ReasonRemoveFailed: a deleted Checkpoint's image could not be removed yet (its node is
	// not Ready or the agent failed); retried, the finalizer stays.
	ReasonRemoveFailed = "RemoveFailed"
	// ReasonNameTaken: a SandboxFork's copy could not get its Sandbox, the name FORK-i being
	// taken by an object the fork does not control (the message names it); that copy was
	// removed from its node and is listed with the error.
	ReasonNameTaken = "NameTaken"
)

// SecretRef names a key of a Secret in the controller's namespace.
type SecretRef struct {
	// name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +required
	Name string `json:"name"`
	// key in its data (default: token for a token, ca.crt for a CA).
	// +optional
	Key string `json:"key,omitempty"`
}

// AgentTLS is how the controller checks the agent's certificate.
type AgentTLS struct {
	// caSecretRef holds the PEM CA (key ca.crt by default).
	// +required
	CASecretRef SecretRef `json:"caSecretRef"`
	// serverName is the name the certificate must carry.
	// +kubebuilder:default=zygo-node
	// +optional
	ServerName string `json:"serverName,omitempty"`
}

// ZygoNodeSpec is one node agent (`zygo serve --listen`) and how to reach it.
type ZygoNodeSpec struct {
	// address is the agent's API, HOST:PORT.
	// +kubebuilder:validation:MinLength=3
	// +required
	Address string `json:"address"`
	// tokenSecretRef holds the agent's API token.
	// +required
	TokenSecretRef SecretRef `json:"tokenSecretRef"`
	// tls: absent means plain HTTP, which an agent serves on loopback only.
	// +optional
	TLS *AgentTLS `json:"tls,omitempty"`
	// nodeName is the Kubernetes node the agent runs on, if any.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
}

// ZygoNodeStatus is what the controller's last probe saw.
type ZygoNodeStatus struct {
	// conditions: Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// lastSeen is when the agent last answered.
	// +optional
	LastSeen *metav1.Time `json:"lastSeen,omitempty"`
	// version is the agent's zygo version.
	// +optional
	Version string `json:"version,omitempty"`
}

// ZygoNode is a node agent the controller places work on.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=zn
// +kubebuilder:printcolumn:name="Address",type="string",JSONPath=".spec.address"
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type=='Ready')].status"
// +kubebuilder:printcolumn:name="Version",type="string",JSONPath=".status.version"
type ZygoNode struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ZygoNodeSpec   `json:"spec"`
	Status ZygoNodeStatus `json:"status,omitempty"`
}

// ZygoNodeList is a list of ZygoNodes.
//
// +kubebuilder:object:root=true
type ZygoNodeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ZygoNode `json:"items"`
}

// LocalRef names an object in the same namespace.
type LocalRef struct {
	// name of the object.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
}

// CheckpointSpec asks for an image of a running Sandbox. Both fields are immutable: they are
// the image's identity (a changed tag would no longer name the image taken).
//
// +kubebuilder:validation:XValidation:rule="has(self.tag) == has(oldSelf.tag) && (!has(self.tag) || self.tag == oldSelf.tag)",message="tag is immutable"
type CheckpointSpec struct {
	// sandboxRef names the Sandbox.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="sandboxRef is immutable"
	// +required
	SandboxRef LocalRef `json:"sandboxRef"`
	// tag is the checkpoint's tag on the node (default: "k8s-" and the object's UID).
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`
	// +optional
	Tag string `json:"tag,omitempty"`
}

// CheckpointStatus is where the image is.
type CheckpointStatus struct {
	// conditions: Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// nodeName is the ZygoNode holding the image: forks of it run there.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// checkpointID is the image's id on that node.
	// +optional
	CheckpointID string `json:"checkpointID,omitempty"`
	// tag is the tag the image was taken with (spec.tag, else "k8s-" and the UID): deleting
	// the Checkpoint removes the image only when it still carries this tag.
	// +optional
	Tag string `json:"tag,omitempty"`
}

// Checkpoint is an immutable image of a Sandbox, on the node that holds it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=zcp
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type=='Ready')].status"
// +kubebuilder:printcolumn:name="Node",type="string",JSONPath=".status.nodeName"
// +kubebuilder:printcolumn:name="ID",type="string",JSONPath=".status.checkpointID"
type Checkpoint struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   CheckpointSpec   `json:"spec"`
	Status CheckpointStatus `json:"status,omitempty"`
}

// CheckpointList is a list of Checkpoints.
//
// +kubebuilder:object:root=true
type CheckpointList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Checkpoint `json:"items"`
}

// SandboxForkSpec asks for count resealed copies of a Sandbox. The whole spec is immutable: a
// fork happens once.
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a SandboxFork's spec is immutable"
type SandboxForkSpec struct {
	// sourceRef names the Sandbox to copy.
	// +required
	SourceRef LocalRef `json:"sourceRef"`
	// count is the number of copies (1..16, a node agent's bound).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	// +required
	Count int32 `json:"count"`
	// checkpointRef names a Checkpoint of the source to restore; absent: a fresh checkpoint.
	// +optional
	CheckpointRef *LocalRef `json:"checkpointRef,omitempty"`
	// nodeName asks for the copies on this node (a ZygoNode's spec.nodeName). When it is not
	// the source's node, the checkpoint image is copied there first (status.copiedBytes):
	// docs/kubernetes.md, "What a cross-node fork costs".
	// +kubebuilder:validation:MaxLength=253
	// +optional
	NodeName string `json:"nodeName,omitempty"`
}

// ForkChild is one copy's outcome.
type ForkChild struct {
	// index of the copy, 0..count-1.
	Index int32 `json:"index"`
	// sandbox is the Sandbox object of a copy that runs.
	// +optional
	Sandbox string `json:"sandbox,omitempty"`
	// sandboxID is the copy's Zygo sandbox id on the node.
	// +optional
	SandboxID string `json:"sandboxID,omitempty"`
	// generation is its clone-generation token.
	// +optional
	Generation string `json:"generation,omitempty"`
	// error is why the copy failed (it was destroyed, never handed out).
	// +optional
	Error string `json:"error,omitempty"`
}

// SandboxForkStatus is the fork's outcome; only the controller writes it.
type SandboxForkStatus struct {
	// conditions: Complete.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// nodeName is where the copies run.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// checkpointID is the image the copies were restored from.
	// +optional
	CheckpointID string `json:"checkpointID,omitempty"`
	// succeeded and failed count the copies.
	// +optional
	Succeeded int32 `json:"succeeded,omitempty"`
	// +optional
	Failed int32 `json:"failed,omitempty"`
	// children is every copy, by index.
	// +optional
	// +listType=atomic
	Children []ForkChild `json:"children,omitempty"`
	// copiedFrom is, for a cross-node fork, the image copied: "NODE/CHECKPOINT-ID" on the
	// source's node. checkpointID is then the copy on nodeName, which the SandboxFork owns
	// (its deletion removes it once the copies are gone).
	// +optional
	CopiedFrom string `json:"copiedFrom,omitempty"`
	// copiedBytes is how many bytes of image a cross-node fork copied between nodes.
	// +optional
	CopiedBytes int64 `json:"copiedBytes,omitempty"`
}

// SandboxFork copies a Sandbox count ways; each copy is resealed and is a Sandbox of its own,
// owned by the SandboxFork.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=sbfork
// +kubebuilder:printcolumn:name="Complete",type="string",JSONPath=".status.conditions[?(@.type=='Complete')].status"
// +kubebuilder:printcolumn:name="Succeeded",type=integer,JSONPath=`.status.succeeded`
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.failed`
type SandboxFork struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SandboxForkSpec   `json:"spec"`
	Status SandboxForkStatus `json:"status,omitempty"`
}

// SandboxForkList is a list of SandboxForks.
//
// +kubebuilder:object:root=true
type SandboxForkList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SandboxFork `json:"items"`
}

// ConfigMapSource is a ConfigMap whose keys are the function's files (data and binaryData).
type ConfigMapSource struct {
	// name of the ConfigMap.
	// +kubebuilder:validation:MinLength=1
	// +required
	Name string `json:"name"`
}

// URLSource is a gzip'd tar of the function's files at an HTTP(S) URL.
type URLSource struct {
	// url of the archive.
	// +kubebuilder:validation:Pattern=`^https?://`
	// +required
	URL string `json:"url"`
	// sha256 of the archive (64 hex digits); a mismatch is SourceFailed.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	// +required
	SHA256 string `json:"sha256"`
}

// OCISource is an OCI artifact holding the function's files: an image manifest with one
// layer, a tar or gzip'd tar of the function's directory (docs/kubernetes.md, "OCI sources").
type OCISource struct {
	// reference is the artifact: registry/repo:tag or registry/repo@sha256:... (a digest is
	// checked against the manifest pulled).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +required
	Reference string `json:"reference"`
	// pullSecretRef names a Secret of the Function's namespace of type
	// kubernetes.io/dockerconfigjson (as an imagePullSecret) with the registry's credentials;
	// absent: anonymous.
	// +optional
	PullSecretRef *LocalRef `json:"pullSecretRef,omitempty"`
}

// FunctionSource is where the code comes from: exactly one of its fields.
//
// +kubebuilder:validation:XValidation:rule="(has(self.configMap) ? 1 : 0) + (has(self.url) ? 1 : 0) + (has(self.oci) ? 1 : 0) == 1",message="source: set exactly one of configMap, url, oci"
type FunctionSource struct {
	// +optional
	ConfigMap *ConfigMapSource `json:"configMap,omitempty"`
	// +optional
	URL *URLSource `json:"url,omitempty"`
	// +optional
	OCI *OCISource `json:"oci,omitempty"`
}

// FunctionLimits bound each request.
type FunctionLimits struct {
	// timeoutMs is the wall time per request.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=900000
	// +optional
	TimeoutMs int32 `json:"timeoutMs,omitempty"`
	// memoryMiB is the memory per request.
	// +kubebuilder:validation:Minimum=16
	// +kubebuilder:validation:Maximum=65536
	// +optional
	MemoryMiB int32 `json:"memoryMiB,omitempty"`
	// cpuMs is the CPU time per request.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=900000
	// +optional
	CPUMs int32 `json:"cpuMs,omitempty"`
}

// FunctionSpec is a warm function and how many nodes serve it.
type FunctionSpec struct {
	// runtime is python or node.
	// +kubebuilder:validation:Enum=python;node
	// +required
	Runtime string `json:"runtime"`
	// handler is module:function (python) or file.js:function (node).
	// +kubebuilder:validation:MinLength=3
	// +required
	Handler string `json:"handler"`
	// source is where the code comes from.
	// +required
	Source FunctionSource `json:"source"`
	// limits bound each request.
	// +optional
	Limits FunctionLimits `json:"limits,omitempty"`
	// env of the function.
	// +optional
	// +listType=map
	// +listMapKey=name
	Env []agentsv1beta1.EnvVar `json:"env,omitempty"`
	// secrets are Kubernetes Secret keys, delivered per request on tmpfs.
	// +optional
	// +listType=map
	// +listMapKey=name
	Secrets []agentsv1beta1.SecretFile `json:"secrets,omitempty"`
	// replicas is the number of nodes that serve it.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=64
	// +kubebuilder:default=1
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
}

// FunctionNode is one node serving the function.
type FunctionNode struct {
	// name of the ZygoNode.
	Name string `json:"name"`
	// version deployed there.
	// +optional
	Version string `json:"version,omitempty"`
}

// FunctionStatus is where the function is served; only the controller writes it.
type FunctionStatus struct {
	// conditions: Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// nodes serve it; the route forwards only to these.
	// +optional
	// +listType=map
	// +listMapKey=name
	Nodes []FunctionNode `json:"nodes,omitempty"`
	// readyReplicas is how many of nodes are Ready.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// route is the path of the controller's route that invokes it.
	// +optional
	Route string `json:"route,omitempty"`
	// observedGeneration is the spec generation last deployed.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// sourceDigest is the sha256 of the bundle last deployed.
	// +optional
	SourceDigest string `json:"sourceDigest,omitempty"`
}

// Function is a warm function served by some of the nodes, invoked through the controller's route.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.readyReplicas
// +kubebuilder:resource:scope=Namespaced,shortName=zfn
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type=='Ready')].status"
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Route",type="string",JSONPath=".status.route"
type Function struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   FunctionSpec   `json:"spec"`
	Status FunctionStatus `json:"status,omitempty"`
}

// FunctionList is a list of Functions.
//
// +kubebuilder:object:root=true
type FunctionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Function `json:"items"`
}
