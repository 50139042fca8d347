// Package sandbox runs long-lived sandboxes that can be checkpointed, forked N ways and rolled
// back, and makes every restored copy independent before anyone may use it (reseal).
//
// It owns the Backend interface its engines implement (gVisor today in sandbox/gvisor, a VM
// later), the typed sandbox states, the Registry interface its records are kept in (SQLite in
// the daemon, MemRegistry in tests) and the Manager that drives the lifecycle.
//
// # Lifecycle
//
// A sandbox is a record (SandboxRecord, keyed by a stable id) plus at most one engine instance
// (keyed by an engine id that changes on rollback). The Manager walks it through State values
// with one transition function:
//
//	create:     Creating  -> Running            Backend.Create, wait for the guest
//	checkpoint: Running   -> Checkpointing -> Running
//	                                            Checkpointer.Checkpoint into a fresh image dir;
//	                                            the source keeps running
//	fork:       (child)   Restoring -> Resealing -> Running
//	                                            Checkpointer.Restore, then reseal; a child that
//	                                            fails either step is destroyed, never Running
//	rollback:   Running   -> RollingBack -> Running
//	                                            restore the checkpoint under a new engine id,
//	                                            reseal, then destroy the old engine instance
//	rm:         any       -> Removing -> (record deleted)
//	                                            ends the calls in flight (ErrRemoved) first
//	death:      Running   -> Dead               the engine exited while the daemon ran
//	                                            (ExitWatcher) or while it was down (recovery);
//	                                            calls fail with ErrDead; rm cleans it up
//	recovery:   (shown Recovering until re-attached, in the background: StartRecover)
//
// Reseal (issue 5) is the hook Manager.resealChild: it runs after every restore, fork and
// rollback alike, and before the copy is marked Running.
package sandbox

import (
	"context"
	"io"
	"syscall"

	"github.com/zygo-run/zygo/internal/guest"
)

// Spec describes one engine instance. The Manager fills it; backends must not keep a
// reference to Boot after Create returns.
type Spec struct {
	// ID is the engine instance id: lowercase letters, digits and '-', at most 64 bytes,
	// unique among the backend's instances.
	ID string
	// Hostname is the sandbox's hostname. Per instance: a restored copy gets its own.
	Hostname string
	// RootfsDir is the read-only lower layer of the root filesystem. Empty means the host's
	// /usr (and the /bin, /lib symlinks), read-only. Writes always land in memory.
	RootfsDir string
	// Boot is handed to a freshly created guest agent. Restore ignores it.
	Boot guest.Boot
	// Token is the token the guest agent will present: Boot.Token for Create, the token the
	// checkpointed agent held for Restore.
	Token string
	// Limits are the instance's resource limits. A restore must be given the limits of the
	// sandbox the image was taken of (its checkpoint record's options): the engine may refuse
	// an image whose limits differ (runsc compares the process rlimits). Zero: none.
	Limits Limits
	// HostUID is the host uid, and gid of the same number, that the instance's engine
	// processes run as: the guest's root is mapped to it, and to nothing else. Per instance:
	// a restored copy may get its own. 0 means the engine's default (runsc: host root in an
	// identity-mapped user namespace).
	HostUID uint32
	// Net is the network the instance runs on; nil means none (loopback only). Per instance:
	// every restored copy is given a namespace of its own, and so its own MAC and address.
	Net *NetAttachment
	// ImageImported is set by Restore for an image imported from another daemon
	// (CheckpointRecord.Origin): the engine must refuse it unless it carries the engine's own
	// record of the instance it was taken of (gVisor: its bundle) and that record matches
	// spec's in everything but per-copy and per-daemon host paths, none of which it may use.
	ImageImported bool
}

// NetAttachment is a network namespace the host prepared for one instance: one interface
// (besides loopback) with the instance's address, its default route and the host's NAT and
// filter behind it. The engine runs its own network stack on that interface (runsc
// --network=sandbox takes the interface's addresses, routes and MAC when it boots or restores).
// The caller owns the namespace: it outlives the instance's Destroy and is removed by whoever
// made it.
type NetAttachment struct {
	// NetnsPath names the namespace: a bind mount such as /run/netns/NAME.
	NetnsPath string
	// ResolvConf is the instance's /etc/resolv.conf; empty: no name servers.
	ResolvConf []byte
}

// Instance is a running engine instance as the Manager sees it.
type Instance struct {
	ID string
	// Guest is the channel to the instance's guest agent, connected when Create or Restore
	// returns. The backend owns it and closes it in Destroy; callers must not Close it.
	Guest Guest
}

var _ Guest = (*guest.Client)(nil)

// Guest is the host's channel to one instance's guest agent, whatever carries it (a unix
// socket bound into a gVisor sandbox today, a vsock for a VM later: guest.Transport). Every
// engine runs the same zygo-guest, so every backend hands out a *guest.Client over its own
// transport; the interface is what the Manager needs of it, so tests and other engines may
// supply their own.
//
// Calls are safe for concurrent use. A call made while the channel is down (the guest
// reconnecting after a checkpoint) waits for it until ctx ends. Errors wrap the errdefs
// categories the guest reports (ErrNotFound for a missing file, ErrInvalidArgument for a bad
// request) or errdefs.ErrUnavailable when the channel fails.
type Guest interface {
	// Info returns the guest's identity, services and clock.
	Info(ctx context.Context) (guest.Info, error)
	// Exec runs req to completion, streaming its output to stdout and stderr (either may be
	// nil: discarded), and returns its exit status.
	Exec(ctx context.Context, req guest.ExecRequest, stdout, stderr io.Writer) (guest.ExitStatus, error)
	// RunCode runs Python in the guest's persistent interpreter.
	RunCode(ctx context.Context, req guest.CodeRequest, stdout, stderr io.Writer) (guest.CodeResult, error)
	// PutFile writes r to the absolute guest path with mode perm, making parent dirs.
	PutFile(ctx context.Context, path string, perm uint32, r io.Reader) error
	// GetFile copies the guest file at path to w.
	GetFile(ctx context.Context, path string, w io.Writer) error
	// ListFiles lists the guest directory at path.
	ListFiles(ctx context.Context, path string) (guest.Listing, error)
	// WriteSecrets writes each secret to the guest's secrets dir (mode 0400).
	WriteSecrets(ctx context.Context, secrets map[string][]byte) error
	// Reseal makes a restored copy independent (new identity, token, entropy, secrets); the
	// channel presents req.NewToken from then on.
	Reseal(ctx context.Context, req guest.ResealRequest) (guest.ResealResult, error)

	// StartProcess starts a process of the guest's process table and streams its events
	// (start, output, end); the channel closes after end, when ctx ends or when the channel
	// to the guest breaks, and the process keeps running. ConnectProcess streams the events of
	// a running one from now on, beginning with start.
	StartProcess(ctx context.Context, cfg guest.ProcessConfig) (<-chan guest.ProcessEvent, error)
	ConnectProcess(ctx context.Context, sel guest.ProcessSelector) (<-chan guest.ProcessEvent, error)
	// ListProcesses returns the table's running processes.
	ListProcesses(ctx context.Context) ([]guest.ProcessInfo, error)
	// SendInput, CloseStdin and SignalProcess act on one process of the table.
	SendInput(ctx context.Context, sel guest.ProcessSelector, data []byte) error
	CloseStdin(ctx context.Context, sel guest.ProcessSelector) error
	SignalProcess(ctx context.Context, sel guest.ProcessSelector, sig syscall.Signal) error
	// Stat, ListDir, MakeDir, Move and RemovePath are filesystem operations on absolute guest
	// paths; WatchDir streams changes under a directory until ctx ends or the channel breaks.
	Stat(ctx context.Context, path string) (guest.EntryInfo, error)
	ListDir(ctx context.Context, path string, depth int) ([]guest.EntryInfo, error)
	MakeDir(ctx context.Context, path, user string) (guest.EntryInfo, error)
	Move(ctx context.Context, src, dst string) (guest.EntryInfo, error)
	RemovePath(ctx context.Context, path string) error
	// ReplaceFile renames the regular file src over dst in one step.
	ReplaceFile(ctx context.Context, src, dst string) error
	WatchDir(ctx context.Context, path string, recursive bool) (<-chan guest.FsEvent, error)
	// PutFileAs is PutFile with the file and the parents it makes owned by user ("" root).
	PutFileAs(ctx context.Context, path string, perm uint32, user string, r io.Reader) error
	// GetFileAs is GetFile with the file opened as user ("" root).
	GetFileAs(ctx context.Context, path, user string, w io.Writer) error
	// UserInfo returns a user of the guest's /etc/passwd ("" is root).
	UserInfo(ctx context.Context, name string) (guest.UserInfo, error)
}

// Backend runs sandboxes on one engine.
//
// Implementations are safe for concurrent use on different ids; calls on the same id are
// serialised by the caller (the Manager).
type Backend interface {
	// Name is a short engine name ("gvisor").
	Name() string

	// Create starts an instance from spec with zygo-guest as PID 1 and returns once the guest
	// has connected. It returns an error wrapping errdefs.ErrExists when spec.ID is in use,
	// errdefs.ErrInvalidArgument for a bad spec, errdefs.ErrUnavailable when the engine or the
	// guest fails; on error nothing of the instance is left behind.
	Create(ctx context.Context, spec Spec) (*Instance, error)

	// Attach adopts an instance that is already running (after the daemon restarted) and
	// returns once its guest has connected again. It returns an error wrapping
	// errdefs.ErrNotFound when the engine knows no such instance and
	// errdefs.ErrFailedPrecondition when it exists but is not running.
	Attach(ctx context.Context, spec Spec) (*Instance, error)

	// Destroy stops the instance and removes everything it had: engine container, processes,
	// mounts, files. Idempotent: an unknown id returns nil.
	Destroy(ctx context.Context, id string) error

	// List returns the ids of every instance the engine still has, running or not, including
	// ones this process did not create (for recovery).
	List(ctx context.Context) ([]string, error)
}

// Checkpointer is the optional capability to save and restore running instances; find it with
// a type assertion on the Backend.
type Checkpointer interface {
	// Checkpoint saves instance id into imageDir, which must not exist, and leaves the source
	// running. imageDir is created complete or not at all. The source's guest connection is
	// re-established before Checkpoint returns. It returns an error wrapping
	// errdefs.ErrNotFound for an unknown id and errdefs.ErrExists when imageDir exists.
	Checkpoint(ctx context.Context, id, imageDir string) error

	// Restore starts a new instance spec.ID from the image in imageDir and returns once its
	// guest has connected (before any reseal). Many restores of one image may run at once.
	// On error (a corrupted image included) nothing of the new instance is left behind.
	Restore(ctx context.Context, imageDir string, spec Spec) (*Instance, error)
}

// ImportChecker is an optional capability of a Checkpointer, found by type assertion: it
// checks, when an image is imported (ImportCheckpoint) and before it is kept, that the image
// in imageDir would pass Restore's checks of an imported image (Spec.ImageImported) for spec.
// It reads imageDir only. Errors wrap errdefs.ErrFailedPrecondition, say what is missing or
// differs, and name no host path.
type ImportChecker interface {
	CheckImportedImage(imageDir string, spec Spec) error
}
