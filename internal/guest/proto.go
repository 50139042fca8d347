// Package guest is both ends of the host–guest channel of a Zygo sandbox: the agent that runs
// as PID 1 inside it (zygo-guest: exec, the persistent code interpreter, files, services,
// reseal, a process table and filesystem operations for E2B's envd API) and the host-side Client that the sandbox backends hand to the Manager.
//
// # The channel
//
// The host listens on a unix socket in the sandbox's own host directory, which is bind-mounted
// read-only at /zygo/host; the guest dials out to /zygo/host/agent.sock. A socket the guest
// dialled out does not block a gVisor checkpoint (a listening one would), and it is dead after a
// restore or a checkpoint --leave-running: the agent sees EOF and dials again. A restored copy
// reads its own bundle, so the same path inside reaches the copy's own host directory and its
// own listener. The agent dials again forever (backoff 5 ms to 500 ms), so a host that
// restarts is found again too.
//
// Code in the sandbox cannot take the channel's place: the directory is read-only to it (no
// rename, no listener of its own, no writes to the host's disk), the processes the agent starts
// lack CAP_SYS_ADMIN (no mount over it), and PID 1 is not dumpable (no reading its memory or
// descriptors through /proc or ptrace). Even a process that did reach the host's socket learns
// nothing: each connection opens with a Noise NNpsk0 handshake whose pre-shared key is derived
// from the current token (noise.go), the Hello inside it, and the token itself never crosses the
// wire. Without the token a peer cannot finish the handshake, and a relay cannot read or change
// the frames that follow. Then the connection carries HTTP/2 with the guest as the server and
// the host as the client; every request also carries "Authorization: Bearer TOKEN". The token
// is rotated by reseal: after a fork, the parent's token no longer works on the child.
//
// The first token reaches the agent in the boot file (BootPath); the host removes it when the
// first connection authenticates, before the agent starts any service.
package guest

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Paths inside the sandbox.
const (
	// HostDir is where the per-sandbox host directory is mounted (read-only).
	HostDir = "/zygo/host"
	// SocketPath is the host's listener, dialled by the agent.
	SocketPath = HostDir + "/agent.sock"
	// BootPath is the boot file the host writes before Create; the agent reads it, and the
	// host removes it when the first connection authenticates.
	BootPath = HostDir + "/boot.json"
	// BinaryPath is where the agent binary is mounted read-only; it is PID 1.
	BinaryPath = "/zygo/guest"
	// RunDir holds what the agent publishes for code in the sandbox.
	RunDir = "/run/zygo"
	// GenerationPath holds the current 128-bit generation token, 32 hex digits, no newline.
	GenerationPath = RunDir + "/generation"
	// IdentityPath holds the Identity of the current copy as JSON.
	IdentityPath = RunDir + "/identity.json"
	// SecretsDir holds secrets re-written on every reseal, one file per name, mode 0400.
	SecretsDir = "/run/secrets"
)

// ProtocolVersion is the Hello version this package speaks. Version 2 binds the channel to the
// token (noise.go); version 1 sent the token in a plaintext Hello line.
const ProtocolVersion = 2

// Hello is the payload of the guest's first handshake message on every new connection
// (encrypted under the token's key; the token itself is not in it).
type Hello struct {
	Proto      int    `json:"proto"`
	SandboxID  string `json:"sandbox_id"`
	Generation string `json:"generation"`
}

// HelloReply is the payload of the host's handshake answer.
type HelloReply struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// Boot is what the host gives a freshly created sandbox, in BootPath. A restored copy never
// reads a Boot: it learns its identity from Reseal.
type Boot struct {
	Token    string    `json:"token"`
	Identity Identity  `json:"identity"`
	Services []Service `json:"services,omitempty"`
	Env      []string  `json:"env,omitempty"` // default environment of exec and services
	// MachineID is written to /etc/machine-id (32 hex digits; empty: the agent draws one).
	MachineID string `json:"machine_id,omitempty"`
}

// Identity is published at IdentityPath after boot and after every reseal.
type Identity struct {
	SandboxID    string    `json:"sandbox_id"`
	ParentID     string    `json:"parent_id,omitempty"`
	CheckpointID string    `json:"checkpoint_id,omitempty"`
	Generation   string    `json:"generation"`
	Hostname     string    `json:"hostname,omitempty"`
	ResumedAt    time.Time `json:"resumed_at"`
	// SuspendedNS is how long this copy spent as a checkpoint image (wall time between the
	// checkpoint and the restore), in nanoseconds. On gVisor the monotonic clock jumps forward
	// by about this much on restore (docs/sandboxes.md, "Clock policy"): deadlines measured on
	// it already include the suspension.
	SuspendedNS int64 `json:"suspended_ns"`
}

// OnFork is what reseal does to a declared service.
type OnFork string

const (
	// OnForkRestart stops the service and starts a fresh process (fresh state).
	OnForkRestart OnFork = "restart"
	// OnForkSignal sends Service.Signal after the new generation is published.
	OnForkSignal OnFork = "signal"
	// OnForkKeep leaves the process alone.
	OnForkKeep OnFork = "keep"
)

// Restart is when the agent starts a declared service again after its process ended, as
// Docker's and systemd's restart policies (docs/sandboxes.md, "Services").
type Restart string

const (
	// RestartOnFailure restarts a service that exited with a non-zero code or was killed by a
	// signal, or could not be started. The default.
	RestartOnFailure Restart = "on-failure"
	// RestartAlways restarts a service whenever its process ended.
	RestartAlways Restart = "always"
	// RestartNo never restarts it (a reseal with OnForkRestart still starts a fresh process).
	RestartNo Restart = "no"
)

// Service is a long-lived process the agent starts at boot and supervises.
type Service struct {
	Name   string   `json:"name"`
	Argv   []string `json:"argv"`
	Env    []string `json:"env,omitempty"`
	OnFork OnFork   `json:"on_fork,omitempty"` // default keep
	Signal int      `json:"signal,omitempty"`  // for OnForkSignal; default SIGHUP
	// Restart is the restart policy; "" means RestartOnFailure. Restarts wait 100 ms, doubled
	// for each consecutive one up to 30 s, back to 100 ms once a process stayed up 10 s.
	Restart Restart `json:"restart,omitempty"`
}

// ServiceStatus is the state of one declared service, as the agent reports it in Info.
type ServiceStatus struct {
	Name    string  `json:"name"`
	Restart Restart `json:"restart"` // the effective policy
	Running bool    `json:"running"`
	PID     int     `json:"pid,omitempty"` // of the running process, in the sandbox
	// Restarts counts the starts the supervisor made after a process ended (not the first
	// start, not a reseal's OnForkRestart).
	Restarts int `json:"restarts"`
	// LastExit is how the last process ended; nil while none has ended.
	LastExit   *ExitStatus `json:"last_exit,omitempty"`
	LastExitAt time.Time   `json:"last_exit_at,omitzero"`
	// LastError is why the last start failed ("" when it did not).
	LastError string `json:"last_error,omitempty"`
	// NextRestartAt is when a restart is due while the service waits in backoff.
	NextRestartAt time.Time `json:"next_restart_at,omitzero"`
	// Log is the file, inside the sandbox, that holds the service's stdout and stderr
	// (ServiceLogDir/NAME.log, at most MaxServiceLogBytes; the older part in NAME.log.1).
	Log string `json:"log,omitempty"`
}

// ExecRequest runs one command in the sandbox.
type ExecRequest struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env,omitempty"` // appended to the boot environment
	Cwd  string   `json:"cwd,omitempty"` // default /
	// Timeout ends the command: SIGTERM to its process group, SIGKILL ExecKillGrace later.
	// 0: until ctx ends (which does the same).
	Timeout time.Duration `json:"timeout_ns,omitempty"`
	// Stdin, when not nil, is streamed to the command's stdin while it runs: bytes reach it as
	// Read returns them, and EOF closes the command's stdin (a read error abandons the call:
	// Client.Exec kills the command and returns the error). nil: the command's stdin is
	// /dev/null. The caller owns Stdin and closes it if it needs closing; Client.Exec never
	// does. When the command exits before Stdin's EOF, Exec returns without waiting for it:
	// one Read may still be in flight then, and its bytes are dropped.
	Stdin io.Reader `json:"-"`
}

// ExitStatus is how a process ended.
type ExitStatus struct {
	Code     int  `json:"code"`             // exit code; 128+N when killed by signal N
	Signal   int  `json:"signal,omitempty"` // the signal that killed it, or 0
	TimedOut bool `json:"timed_out,omitempty"`
}

// Event is one line of a streamed exec or run-code response (NDJSON).
type Event struct {
	Stream string      `json:"stream,omitempty"` // "stdout" or "stderr"
	Data   []byte      `json:"data,omitempty"`
	Exit   *ExitStatus `json:"exit,omitempty"`   // last event of an exec
	Result *CodeResult `json:"result,omitempty"` // last event of a run-code
	Error  string      `json:"error,omitempty"`  // last event when the call failed
}

// CodeRequest runs Python source in the persistent interpreter.
type CodeRequest struct {
	Code string `json:"code"`
	// Timeout raises KeyboardInterrupt in the code; if it still runs InterruptGrace later the
	// interpreter is killed and restarted (CodeResult.Restarted). 0: until ctx ends.
	Timeout time.Duration `json:"timeout_ns,omitempty"`
}

// CodeResult is the outcome of one run-code call.
type CodeResult struct {
	OK bool `json:"ok"`
	// Value is repr() of the last statement when it is an expression, as in a notebook cell.
	Value string `json:"value,omitempty"`
	// Error is the traceback when OK is false. Value and Error are each cut at
	// MaxCodeValueBytes.
	Error string `json:"error,omitempty"`
	// OutputTruncated is true when the call printed more than MaxCodeOutputBytes: what is
	// beyond was discarded and OutputTruncatedMarker sent on stderr where it was cut.
	OutputTruncated bool `json:"output_truncated,omitempty"`
	// Restarted is true when the interpreter died under the call: killed because the code did
	// not stop within InterruptGrace of a timeout's KeyboardInterrupt, or it exited. OK is then
	// false, Error says why, the interpreter's variables are lost and the next call starts a
	// fresh one.
	Restarted bool `json:"restarted,omitempty"`
}

// ValidateEnv checks KEY=VALUE entries: each has a '=', a non-empty KEY without '=' or NUL,
// and no NUL in VALUE. The error names the first bad entry.
func ValidateEnv(env []string) error {
	for _, kv := range env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsRune(kv, 0) {
			return fmt.Errorf("env %q: want KEY=VALUE with a non-empty KEY and no NUL byte", kv)
		}
	}
	return nil
}

// MaxListEntries bounds one listing: a directory with more entries lists the first
// MaxListEntries in name order, and Listing.Total says how many it has.
const MaxListEntries = 10000

// Listing is the answer of a files listing.
type Listing struct {
	Entries []FileInfo `json:"entries"`
	Total   int        `json:"total"` // entries in the directory; more than len(Entries) when capped
}

// FileInfo describes one directory entry.
type FileInfo struct {
	Name    string    `json:"name"`
	Size    int64     `json:"size"`
	Mode    uint32    `json:"mode"` // io/fs.FileMode bits
	ModTime time.Time `json:"mod_time"`
	IsDir   bool      `json:"is_dir"`
}

// Info is the agent's answer to a health probe.
type Info struct {
	SandboxID  string    `json:"sandbox_id"`
	Generation string    `json:"generation"`
	PID        int       `json:"pid"`
	StartedAt  time.Time `json:"started_at"`
	Now        time.Time `json:"now"`
	// Services is the state of every declared service, in declaration order.
	Services []ServiceStatus `json:"services,omitempty"`
}

// SecretsRequest is the body of PUT /v1/secrets: the secrets of a created sandbox.
type SecretsRequest struct {
	// Secrets are written to SecretsDir/NAME, mode 0400; others there are removed.
	Secrets map[string][]byte `json:"secrets"`
}

// ResealRequest makes a restored copy independent. Driven by the host, executed by the agent.
type ResealRequest struct {
	NewToken  string   `json:"new_token"`
	Identity  Identity `json:"identity"`
	MachineID string   `json:"machine_id"` // 32 hex digits
	// Entropy is host randomness the agent writes into the guest pool.
	Entropy []byte `json:"entropy"`
	// HostTime is the host's wall clock when the request was made.
	HostTime time.Time `json:"host_time"`
	// Secrets are written to SecretsDir/NAME, mode 0400; others there are removed.
	Secrets map[string][]byte `json:"secrets,omitempty"`
}

// ResealResult is the agent's acknowledgement.
type ResealResult struct {
	Generation string `json:"generation"`
	// EntropySample is 32 bytes the guest read from getrandom after the reseed; siblings'
	// samples must be pairwise distinct.
	EntropySample []byte `json:"entropy_sample"`
	// EntropyCredited is true when RNDADDENTROPY accepted the host bytes (not on gVisor, whose
	// randomness is host-backed on every call; see docs/sandboxes.md).
	EntropyCredited bool `json:"entropy_credited"`
	// ClockOffset is guest wall clock minus HostTime at receipt, in nanoseconds (before any
	// correction).
	ClockOffset time.Duration `json:"clock_offset_ns"`
	// ClockCorrected is true when ClockOffset exceeded ClockTolerance and the agent set the
	// wall clock to the host's. When it could not, the reseal failed instead.
	ClockCorrected bool `json:"clock_corrected,omitempty"`
	// Services has one "name: action (status)" line per service, e.g. "web: restarted
	// (restarts 2, last exit code 1)".
	Services []string `json:"services,omitempty"`
	// HostSecrets lists the per-machine files the image carried and this copy renewed or
	// removed ("regenerated /etc/ssh/ssh_host_ed25519_key", "removed /var/lib/systemd/random-seed").
	HostSecrets []string `json:"host_secrets,omitempty"`
	// Interfaces are the copy's network interfaces other than loopback as it sees them after
	// the restore (the host checks them against the address and MAC it gave the copy).
	Interfaces []Interface `json:"interfaces,omitempty"`
	// Steps is how long each step took in the guest, by name ("clock", "entropy", "identity",
	// "host_keys", "secrets", "generation", "token", "services", "interpreter", "network",
	// "sample").
	Steps map[string]time.Duration `json:"steps_ns,omitempty"`
}

// Interface is one network interface seen inside a guest.
type Interface struct {
	Name  string   `json:"name"`
	MAC   string   `json:"mac"`   // "02:…", lowercase
	Addrs []string `json:"addrs"` // CIDRs, "10.213.0.2/30"
}

// errorBody is the JSON body of a non-2xx answer.
type errorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"` // "not_found", "invalid", "permission_denied", "conflict", "exists", "too_large", "unauthorized", "internal"
}
