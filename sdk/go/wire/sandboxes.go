package wire

import (
	"io/fs"
	"time"
)

// The sandbox and checkpoint routes, their bodies and statuses are in api/openapi.yaml (the
// contract), served by the daemon at GET /v1/openapi.json. {id} is a sandbox id or name
// everywhere; a checkpoint {id} is an id or a tag.

// Bounds of the sandbox routes.
const (
	// MaxSandboxJSONBytes bounds a JSON request body (an exec's stdin travels in it, unless
	// it is streamed after it: see ExecBody).
	MaxSandboxJSONBytes = 16 << 20
	// MaxFileBytes bounds one file upload. A sandbox's writes live in memory.
	MaxFileBytes = 256 << 20
	// MaxListEntries bounds the entries of one file listing.
	MaxListEntries = 10000
	// MaxForkN is the default bound on a fork's n (a daemon may be configured with another;
	// a larger n is a 400 stating the bound).
	MaxForkN = 16
)

// ForkStreamType is the media type of a streamed fork (and of exec and run-code answers).
const ForkStreamType = "application/x-ndjson"

// CreateSandboxBody is the body of POST /v1/sandboxes; every field is optional. Forks and
// rollbacks inherit it.
type CreateSandboxBody struct {
	Name      string    `json:"name,omitempty"`       // unique; default the id
	RootfsDir string    `json:"rootfs_dir,omitempty"` // a host directory to use, read-only, as the root
	Services  []Service `json:"services,omitempty"`
	Env       []string  `json:"env,omitempty"` // KEY=VALUE for every exec and service
	// Secrets names secrets of the daemon's store (`zygo secret set NAME`): each is written to
	// /run/secrets/NAME (mode 0400) at create and, with its current value, in every fork child
	// and rollback. An unknown name is a 400 naming it.
	Secrets []string `json:"secrets,omitempty"`
	// MemoryMiB bounds the sandbox's memory in MiB: its processes and the files written to its
	// in-memory root together. 0: the daemon's default, 2048 (or the host's memory if less);
	// below 64 or above the host's memory is a 400.
	MemoryMiB int `json:"memory_mib,omitempty"`
	// PIDs bounds the processes and threads alive at once inside. 0: 4096; below 32 is a 400.
	PIDs int `json:"pids,omitempty"`
	// CPUs is a CPU quota in cores (1.5 = one and a half); 0: no quota; below 0.01 or above
	// the host's CPU count is a 400.
	CPUs float64 `json:"cpus,omitempty"`
	// Network is the sandbox's network; nil: the daemon's default, egress (or none on a daemon
	// without network).
	Network *SandboxNetwork `json:"network,omitempty"`
	// Template names a template of the daemon (GET /v1/templates; "base" is built in): its
	// root, and its setup run before the sandbox is handed out. Not with rootfs_dir; unknown
	// is a 404.
	Template string `json:"template,omitempty"`
	// TimeoutMS ends the sandbox this many milliseconds after it starts running (create,
	// fork, restore, resume; POST …/timeout moves it): removed, or paused with
	// on_timeout "pause". 0: never. The deadline is in the daemon's store: a restarted daemon
	// honours it.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// OnTimeout is "kill" (the default) or "pause".
	OnTimeout string `json:"on_timeout,omitempty"`
	// Metadata is the caller's labels: at most 64 pairs of at most 256 bytes each.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// TimeoutBody is the body of POST /v1/sandboxes/{id}/timeout: a new timeout counted from now.
type TimeoutBody struct {
	TimeoutMS int64  `json:"timeout_ms"`           // 0: none
	OnTimeout string `json:"on_timeout,omitempty"` // "kill" or "pause"; empty: unchanged
}

// ResumeBody is the body of POST /v1/sandboxes/{id}/resume; every field is optional.
type ResumeBody struct {
	// TimeoutMS replaces the sandbox's timeout, counted from the resume; 0: its own.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
}

// RestoreBody is the body of POST /v1/checkpoints/{id}/restore; every field is optional.
type RestoreBody struct {
	TimeoutMS int64             `json:"timeout_ms,omitempty"` // the new sandbox's timeout; 0: none
	OnTimeout string            `json:"on_timeout,omitempty"` // "kill" (default) or "pause"
	Metadata  map[string]string `json:"metadata,omitempty"`   // replaces the checkpoint's sandbox's
	// Name is the new sandbox's name (valid as a create's, not in use: 400 or 409 naming
	// name, nothing made); empty: the checkpoint's sandbox's name, a dash and 8 digits.
	Name string `json:"name,omitempty"`
}

// Template is one template of the daemon (GET /v1/templates).
type Template struct {
	Name        string `json:"name"`
	RootfsDir   string `json:"rootfs_dir,omitempty"` // empty: the default root (the host's /usr)
	Description string `json:"description,omitempty"`
}

// SandboxNetwork is a sandbox's network. Every fork child and rollback gets an address and MAC
// of its own; connections open at the checkpoint fail at once in the copies.
type SandboxNetwork struct {
	// Mode is "egress" (an interface of its own, NAT to the outside) or "none" (loopback
	// only). Whatever the lists say, a sandbox never reaches the host, other sandboxes or
	// functions, or link-local and metadata ranges (169.254.0.0/16).
	Mode string `json:"mode,omitempty"`
	// Allow, when not empty, are the only IPv4 CIDRs it may reach; Deny are refused even
	// inside Allow. A malformed CIDR, or an allow entry overlapping a forbidden range, is a
	// 400 naming it ("network.allow[0]").
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
}

// Service is a long-lived process a sandbox starts at boot.
type Service struct {
	Name string   `json:"name"`
	Argv []string `json:"argv"`
	Env  []string `json:"env,omitempty"`
	// OnFork is what a fork or rollback does to it: "restart" (a fresh process), "signal"
	// (Signal, default SIGHUP, after the new generation is published) or "keep" (default).
	OnFork string `json:"on_fork,omitempty"`
	Signal int    `json:"signal,omitempty"`
	// Restart is when the sandbox starts it again after its process ended: "on-failure" (the
	// default), "always" or "no"; after 100 ms, doubled for each consecutive restart up to 30 s.
	Restart string `json:"restart,omitempty"`
}

// Sandbox is a sandbox's record.
type Sandbox struct {
	ID       string `json:"id"` // stable across rollback; "sb-" + 16 hex digits
	Name     string `json:"name"`
	Backend  string `json:"backend"`
	EngineID string `json:"engine_id"` // the current engine instance; changes on rollback
	// State: creating, restoring, resealing, running, checkpointing, rolling_back, paused
	// (checkpointed and stopped: no CPU or memory), resuming, dead (the
	// engine died; Error says why), failed, removing, recovering (retry shortly).
	State        string `json:"state"`
	ParentID     string `json:"parent_id,omitempty"`     // the sandbox it was forked from
	CheckpointID string `json:"checkpoint_id,omitempty"` // the checkpoint its instance was restored from
	Generation   string `json:"generation"`              // 128 bits as 32 hex digits; new on every fork and rollback
	// Options are its create options as in force: the limits with the defaults filled in.
	Options  CreateSandboxBody `json:"options"`
	Services []Service         `json:"services,omitempty"`
	// Address and MAC are the current instance's network identity, new on every fork and
	// rollback; empty without network.
	Address string `json:"address,omitempty"`
	MAC     string `json:"mac,omitempty"`
	// ExpiresAt is when its timeout passes (options.timeout_ms); absent without one and
	// while paused.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	Error     string     `json:"error,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	UpdatedAt time.Time  `json:"updated_at"`
}

// Checkpoint is an immutable image of a sandbox at one moment. Images form a tree: ParentID
// is the checkpoint the source sandbox was itself restored from.
type Checkpoint struct {
	ID         string            `json:"id"` // "cp-" + 16 hex digits
	Tag        string            `json:"tag,omitempty"`
	SandboxID  string            `json:"sandbox_id"` // the source
	ParentID   string            `json:"parent_id,omitempty"`
	Backend    string            `json:"backend"`
	SizeBytes  int64             `json:"size_bytes"`
	Generation string            `json:"generation"` // the source's at checkpoint time
	Hostname   string            `json:"hostname"`
	Options    CreateSandboxBody `json:"options"`
	CreatedAt  time.Time         `json:"created_at"`
	// Checksums has one "crc32c:XXXXXXXX" per file of the image, by path relative to the
	// image's directory (on the daemon's host; its path is not told to callers).
	Checksums map[string]string `json:"checksums,omitempty"`
	// Lost is true when the image is gone (an in-memory image of a sandbox that holds
	// secrets, after a reboot): fork and rollback from it fail with 412; it can be removed.
	Lost bool `json:"lost,omitempty"`
	// Origin is set on a checkpoint imported from another daemon (POST
	// /v1/checkpoints/import): the exporter's ids and tag, for information. Such a checkpoint
	// belongs to no sandbox of this daemon: its SandboxID is an id of its own that names none.
	Origin *CheckpointOrigin `json:"origin,omitempty"`
}

// CheckpointOrigin is where an imported checkpoint came from, as its image's manifest says.
type CheckpointOrigin struct {
	CheckpointID string `json:"checkpoint_id"`
	SandboxID    string `json:"sandbox_id"`
	Tag          string `json:"tag,omitempty"`
}

// ExecBody is the body of POST /v1/sandboxes/{id}/exec: one JSON object of at most
// MaxSandboxJSONBytes. The command's stdin comes in one of two forms, or not at all (then it
// is /dev/null):
//
//   - Stdin: the whole input, base64 in the JSON; the command starts once the body has
//     arrived. For small inputs.
//   - StdinStream: the JSON object is followed, in the same body, by one '\n' and then the
//     stdin bytes, sent as they come (chunked); the end of the body closes the command's
//     stdin. The command starts as soon as the object has arrived and its output streams back
//     while stdin is still being sent (HTTP/1.1 full duplex). A client that goes away before
//     the end of the body kills the command.
//
// Setting both is a 400.
type ExecBody struct {
	Argv        []string `json:"argv"`
	Env         []string `json:"env,omitempty"`   // KEY=VALUE, added to the sandbox's environment
	Cwd         string   `json:"cwd,omitempty"`   // default /
	Stdin       []byte   `json:"stdin,omitempty"` // base64 in JSON
	StdinStream bool     `json:"stdin_stream,omitempty"`
	// TimeoutMs: then SIGTERM to the command's process group, SIGKILL 2 s later; 0: none.
	TimeoutMs int64 `json:"timeout_ms,omitempty"`
}

// CodeBody is the body of POST /v1/sandboxes/{id}/run-code.
type CodeBody struct {
	Code      string `json:"code"`
	TimeoutMs int64  `json:"timeout_ms,omitempty"` // then KeyboardInterrupt; 0: none
}

// StreamEvent is one line of the NDJSON answer of exec and run-code: output chunks as they
// come, then exactly one of Exit (exec), Result (run-code) or Error (the call failed after the
// stream began; before that, the answer is an ordinary error with its status).
type StreamEvent struct {
	Stream string      `json:"stream,omitempty"` // "stdout" or "stderr"
	Data   []byte      `json:"data,omitempty"`   // base64 in JSON
	Exit   *ExitStatus `json:"exit,omitempty"`
	Result *CodeResult `json:"result,omitempty"`
	Error  *ErrorBody  `json:"error,omitempty"`
}

// ExitStatus is how a command ended.
type ExitStatus struct {
	Code     int  `json:"code"`             // exit code; 128+N when killed by signal N
	Signal   int  `json:"signal,omitempty"` // the signal that killed it, or 0
	TimedOut bool `json:"timed_out,omitempty"`
}

// CodeResult is the outcome of a run-code. A Python exception is OK false with its traceback
// in Error: the interpreter and its variables survive it.
type CodeResult struct {
	OK    bool   `json:"ok"`
	Value string `json:"value,omitempty"` // repr of the last statement when it is an expression
	Error string `json:"error,omitempty"`
	// OutputTruncated: the code printed more than 16 MiB; the rest was discarded (a marker on
	// stderr shows where) while the code kept running.
	OutputTruncated bool `json:"output_truncated,omitempty"`
	// Restarted: the interpreter died under the call (it ignored a timeout's KeyboardInterrupt
	// for 2 s and was killed, or it exited); its variables are lost.
	Restarted bool `json:"restarted,omitempty"`
}

// FileInfo describes one directory entry inside a sandbox.
type FileInfo struct {
	Name    string      `json:"name"`
	Size    int64       `json:"size"`
	Mode    fs.FileMode `json:"mode"` // io/fs.FileMode bits, as a number
	ModTime time.Time   `json:"mod_time"`
	IsDir   bool        `json:"is_dir"`
}

// CheckpointBody is the body of POST /v1/sandboxes/{id}/checkpoint.
type CheckpointBody struct {
	Tag string `json:"tag,omitempty"`
}

// ForkBody is the body of POST /v1/sandboxes/{id}/fork.
type ForkBody struct {
	// N is how many children, 1..the daemon's bound (MaxForkN by default); 0 or absent with
	// Names: len(Names). Given with Names, it must equal len(Names) (400 naming names).
	N int `json:"n,omitempty"`
	// From is the checkpoint (id or tag) to restore; empty: checkpoint the sandbox now.
	From string `json:"from,omitempty"`
	// Names, when set, names the children: exactly N distinct names, Names[i] for child i,
	// each valid as a create's name and none in use (400 naming names[i], 409 naming the one
	// in use; nothing is made). Empty: each child is named after its parent.
	Names []string `json:"names,omitempty"`
}

// ForkChild is one child's outcome: its record, or why it failed (it was destroyed).
type ForkChild struct {
	Index   int        `json:"index"`
	Sandbox *Sandbox   `json:"sandbox,omitempty"`
	Error   *ErrorBody `json:"error,omitempty"`
}

// ForkAnswer is the answer of a fork: 200 when at least one child runs (partial success is
// normal, and every failure is listed); when every child failed, the status of their errors'
// category with Error set, and the children still listed.
type ForkAnswer struct {
	Error      *ErrorBody  `json:"error,omitempty"`
	Checkpoint Checkpoint  `json:"checkpoint"`
	Children   []ForkChild `json:"children"`
	Succeeded  int         `json:"succeeded"`
	Failed     int         `json:"failed"`
}

// ForkProgress is a fork's progress so far.
type ForkProgress struct {
	Checkpoint string `json:"checkpoint"` // the checkpoint restored
	N          int    `json:"n"`          // children asked for
	Ready      int    `json:"ready"`      // restored and resealed so far
	Failed     int    `json:"failed"`     // failed so far (each is destroyed)
}

// ForkEvent is one line of a fork streamed as NDJSON (the request's Accept header is
// ForkStreamType): Progress lines while the children are made, then one line with the Answer
// and the HTTP status the plain call would have had. A fork refused before any child is
// attempted (bad n, unknown sandbox, a failed checkpoint) is a plain error answer instead.
type ForkEvent struct {
	Progress *ForkProgress `json:"progress,omitempty"`
	Answer   *ForkAnswer   `json:"answer,omitempty"`
	Status   int           `json:"status,omitempty"` // with Answer
}

// RollbackBody is the body of POST /v1/sandboxes/{id}/rollback.
type RollbackBody struct {
	To string `json:"to"` // checkpoint id or tag
}

// GenerationBody is the answer of GET /v1/sandboxes/{id}/generation.
type GenerationBody struct {
	SandboxID  string `json:"sandbox_id"`
	Generation string `json:"generation"` // 128 bits, 32 hex digits; new on every fork and rollback
}

// PortBody is the answer of POST /v1/sandboxes/{id}/ports/{port}: a TCP port inside the
// sandbox, published on a loopback address of the daemon's host (the daemon carries each
// connection in). The same port asked again gives the same address; a fork child's are its own.
type PortBody struct {
	Port    int    `json:"port"`
	Address string `json:"address"` // "127.0.0.1:PORT"
	URL     string `json:"url"`     // "http://127.0.0.1:PORT/"
}

// ServiceStatus is the live state of one declared service.
type ServiceStatus struct {
	Name     string      `json:"name"`
	Restart  string      `json:"restart"` // the effective policy
	Running  bool        `json:"running"`
	PID      int         `json:"pid,omitempty"` // of the running process, in the sandbox
	Restarts int         `json:"restarts"`      // starts after a process ended
	LastExit *ExitStatus `json:"last_exit,omitempty"`
	// LastExitAt is when the last process ended; zero (left out) while none has.
	LastExitAt    time.Time `json:"last_exit_at,omitzero"`
	LastError     string    `json:"last_error,omitempty"`     // why the last start failed
	NextRestartAt time.Time `json:"next_restart_at,omitzero"` // while it waits in backoff
	Log           string    `json:"log,omitempty"`            // the file, inside, that holds its output
}
