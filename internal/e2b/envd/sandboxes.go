package envd

import (
	"context"
	"io"
	"syscall"
	"time"

	"github.com/zygo-run/zygo/internal/guest"
)

// Sandboxes is what the envd API needs of Zygo's sandbox manager: the process table, the
// filesystem and the persistent interpreter of one sandbox at a time, named by id. The
// adapter in internal/e2b implements it over sandbox.Manager; tests use a fake.
//
// Every method takes the sandbox id first and may be called concurrently. Errors wrap an
// internal/errdefs category: ErrNotFound for a missing sandbox, process or path, ErrExists
// for a directory or move target that exists, ErrInvalidArgument for bad input. Paths are
// absolute and clean (the envd API resolves relative ones against UserHome first), but for
// ProcessConfig.Cwd, which may be relative to the user's home.
//
// The types are envd's own mirror of the contract's internal/guest types, field for field
// and in the same order, so that the adapter converts them with struct conversions.
type Sandboxes interface {
	// CheckRunning returns nil when the sandbox exists and runs; an error wrapping
	// errdefs.ErrNotFound when it does not exist, or another category (ErrFailedPrecondition)
	// when it exists but is paused or stopped. The envd API calls it to tell a missing
	// sandbox (which the SDK reports as a timeout, as E2B's proxy answers 502) from a missing
	// file or process, and for GET /health.
	CheckRunning(ctx context.Context, id string) error
	// UserHome returns the home directory of user in the sandbox's /etc/passwd ("" = root);
	// ErrInvalidArgument for an unknown user. Relative paths are resolved against it.
	UserHome(ctx context.Context, id, user string) (string, error)

	// StartProcess starts a process. The first event is "start" with the pid; the channel
	// is closed after "end", or when ctx ends: cancelling ctx only detaches, the process
	// keeps running (E2B's background commands).
	StartProcess(ctx context.Context, id string, cfg ProcessConfig) (<-chan ProcessEvent, error)
	// ConnectProcess streams a running process: a "start" event with its pid first, then its
	// output from now on and its "end"; the channel is closed after "end" or when ctx ends.
	// ErrNotFound for an unknown pid or tag.
	ConnectProcess(ctx context.Context, id string, sel ProcessSelector) (<-chan ProcessEvent, error)
	// ListProcesses lists the processes started by StartProcess that still run.
	ListProcesses(ctx context.Context, id string) ([]ProcessInfo, error)
	// SendInput writes data to the process's stdin (started with Stdin true).
	SendInput(ctx context.Context, id string, sel ProcessSelector, data []byte) error
	// CloseStdin closes the process's stdin; idempotent.
	CloseStdin(ctx context.Context, id string, sel ProcessSelector) error
	// SignalProcess sends sig to the process.
	SignalProcess(ctx context.Context, id string, sel ProcessSelector, sig syscall.Signal) error

	// Stat describes the entry at path without following a final symlink.
	Stat(ctx context.Context, id, path string) (EntryInfo, error)
	// ListDir lists the directory at path, depth levels deep (1: its entries only).
	ListDir(ctx context.Context, id, path string, depth int) ([]EntryInfo, error)
	// MakeDir creates the directory and its missing parents, owned by user ("" = root);
	// ErrExists when path exists.
	MakeDir(ctx context.Context, id, path, user string) (EntryInfo, error)
	// Move renames src to dst and describes dst.
	Move(ctx context.Context, id, src, dst string) (EntryInfo, error)
	// RemovePath removes path, recursively for a directory.
	RemovePath(ctx context.Context, id, path string) error
	// WatchDir streams changes under the directory at path (below it too when recursive);
	// the channel is closed when ctx ends or the watch fails.
	WatchDir(ctx context.Context, id, path string, recursive bool) (<-chan FsEvent, error)

	// PutFile writes r to path with permission bits perm, creating missing parents.
	PutFile(ctx context.Context, id, path string, perm uint32, r io.Reader) error
	// GetFile copies the regular file at path to w.
	GetFile(ctx context.Context, id, path string, w io.Writer) error
	// RunCode runs Python in the sandbox's persistent interpreter, streaming its output;
	// a Python exception is a result with OK false, not an error.
	RunCode(ctx context.Context, id string, req guest.CodeRequest, stdout, stderr io.Writer) (guest.CodeResult, error)
}

// IDResolver is an optional capability of a Sandboxes: ResolveID returns the id of the
// sandbox ref names (an id or a name); an error wrapping errdefs.ErrNotFound for none. With it,
// the Server keys what it keeps per sandbox by id (a sandbox's name may later be another's).
type IDResolver interface {
	ResolveID(ctx context.Context, ref string) (string, error)
}

// OwnedFilePutter is an optional capability of a Sandboxes: PutFileAs writes the file (and
// the parents it creates) with the credentials of user, as E2B's upload does for its
// `username` (what the user may not write is refused). Without
// it, uploads are owned by root.
type OwnedFilePutter interface {
	PutFileAs(ctx context.Context, id, path string, perm uint32, user string, r io.Reader) error
}

// FileReplacer is an optional capability of a Sandboxes: ReplaceFile renames the regular
// file src over dst in one step. With it, a multipart upload is all or nothing (each part is
// staged beside its target, and renamed only once every part is in); without it, parts are
// written in order and a failure leaves the earlier ones written.
type FileReplacer interface {
	ReplaceFile(ctx context.Context, id, src, dst string) error
}

// UserFileGetter is an optional capability of a Sandboxes: GetFileAs reads the file with the
// credentials of user, as E2B's download does for its `username` (a file the user may not
// read is refused). Without it, downloads read as root.
type UserFileGetter interface {
	GetFileAs(ctx context.Context, id, path, user string, w io.Writer) error
}

// ProcessConfig is what to start (guest.ProcessConfig).
type ProcessConfig struct {
	Cmd   string            // path or name looked up in PATH inside the sandbox
	Args  []string          // argv[1:]
	Env   map[string]string // added to the user's base environment
	Cwd   string            // "" = the user's home; relative: to the user's home
	User  string            // "" = root; else a name in the rootfs's /etc/passwd
	Tag   string            // optional, unique among running processes
	Stdin bool              // keep stdin open for SendInput (else it is /dev/null)
}

// ProcessInfo describes a running process (guest.ProcessInfo).
type ProcessInfo struct {
	PID    uint32
	Tag    string
	Config ProcessConfig
}

// ProcessSelector names a process by pid or by tag; exactly one is set
// (guest.ProcessSelector).
type ProcessSelector struct {
	PID uint32
	Tag string
}

// Kinds of ProcessEvent.
const (
	EventStart  = "start"
	EventStdout = "stdout"
	EventStderr = "stderr"
	EventEnd    = "end"
)

// ProcessEvent is one event of a process's stream (guest.ProcessEvent).
type ProcessEvent struct {
	Kind     string // EventStart, EventStdout, EventStderr or EventEnd
	PID      uint32 // on "start"
	Data     []byte // on "stdout"/"stderr"
	ExitCode int    // on "end"; -1 when killed by a signal
	Signal   string // on "end" when killed by a signal, e.g. "SIGKILL"
	Error    string // on "end" when the process could not run / was killed
}

// Types of EntryInfo.
const (
	TypeFile    = "file"
	TypeDir     = "dir"
	TypeSymlink = "symlink"
	// Special files (guest.EntryFIFO...): E2B's FileType has no value for them, so they are
	// FILE_TYPE_UNSPECIFIED on the wire, their kind in the permissions string ("prw-r--r--").
	TypeFIFO        = "fifo"
	TypeSocket      = "socket"
	TypeCharDevice  = "chardev"
	TypeBlockDevice = "blockdev"
)

// EntryInfo describes a filesystem entry (guest.EntryInfo).
type EntryInfo struct {
	Name, Path    string
	Type          string // TypeFile, TypeDir or TypeSymlink (symlinks are not followed)
	Size          int64  // bytes
	Mode          uint32 // permission bits
	Owner, Group  string
	ModTime       time.Time
	SymlinkTarget string
}

// FsEvent is one change seen by WatchDir (guest.FsEvent): Name is the entry's path relative
// to the watched directory; Op is "create", "write", "remove", "rename" or "chmod".
type FsEvent struct {
	Name string
	Op   string
}
