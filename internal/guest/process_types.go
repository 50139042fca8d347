package guest

import "time"

// The process table and filesystem operations of the agent (docs/sandboxes.md, "Processes
// and filesystem operations"): what E2B's envd offers inside its sandboxes, on Zygo's channel.
//
//	POST /v1/processes                 ProcessConfig → NDJSON ProcessEvent: start, output, end
//	POST /v1/processes/connect?pid|tag → NDJSON ProcessEvent: start, output from now on, end
//	GET  /v1/processes                 → []ProcessInfo (running ones)
//	POST /v1/processes/input?pid|tag   body: bytes for the process's stdin
//	POST /v1/processes/close-stdin?pid|tag
//	POST /v1/processes/signal?pid|tag&signal=N
//	GET  /v1/fs/stat?path              → EntryInfo
//	GET  /v1/fs/list?path&depth        → []EntryInfo
//	POST /v1/fs/mkdir?path&user        → EntryInfo
//	POST /v1/fs/move?src&dst           → EntryInfo (of dst)
//	POST /v1/fs/remove?path
//	GET  /v1/fs/watch?path&recursive   → NDJSON FsEvent until the request ends
//	GET  /v1/users?name                → UserInfo

// Kinds of ProcessEvent.
const (
	ProcessStart  = "start"
	ProcessStdout = "stdout"
	ProcessStderr = "stderr"
	ProcessEnd    = "end"
)

// ProcessConfig is a process to start in the sandbox and keep in the agent's process table.
type ProcessConfig struct {
	// Cmd is a path, or a name looked up in PATH inside the sandbox. Required.
	Cmd  string   `json:"cmd"`
	Args []string `json:"args,omitempty"`
	// Env is added to the user's base environment (the sandbox's default environment with
	// HOME, USER and LOGNAME of the user), replacing variables of the same name.
	Env map[string]string `json:"env,omitempty"`
	// Cwd is the working directory: "" means the user's home ("/" when it does not exist); a
	// relative path is relative to the home.
	Cwd string `json:"cwd,omitempty"`
	// User is a name in the sandbox's /etc/passwd whose uid, gid, groups and home the process
	// gets; "" means root.
	User string `json:"user,omitempty"`
	// Tag is an optional name, unique among the running processes, to select the process by.
	Tag string `json:"tag,omitempty"`
	// Stdin keeps the process's stdin open for SendInput until CloseStdin; else it is /dev/null.
	Stdin bool `json:"stdin,omitempty"`
}

// ProcessInfo is one running process of the table.
type ProcessInfo struct {
	PID    uint32        `json:"pid"`
	Tag    string        `json:"tag,omitempty"`
	Config ProcessConfig `json:"config"`
}

// ProcessSelector names one process: exactly one of PID and Tag is set.
type ProcessSelector struct {
	PID uint32 `json:"pid,omitempty"`
	Tag string `json:"tag,omitempty"`
}

// ProcessEvent is one event of a process's stream.
type ProcessEvent struct {
	Kind string `json:"kind"` // ProcessStart, ProcessStdout, ProcessStderr or ProcessEnd
	PID  uint32 `json:"pid,omitempty"`
	// Data is a chunk of output (at most 32 KiB), on stdout and stderr events.
	Data []byte `json:"data,omitempty"`
	// ExitCode is the exit code on an end event; -1 when a signal killed the process.
	ExitCode int `json:"exit_code"`
	// Signal names the signal that killed the process ("SIGKILL"), on an end event.
	Signal string `json:"signal,omitempty"`
	// Error says why the process ended abnormally (killed by a signal), on an end event.
	Error string `json:"error,omitempty"`
}

// EntryInfo describes one filesystem entry; symlinks are described, not followed.
type EntryInfo struct {
	Name string `json:"name"`
	Path string `json:"path"` // absolute, inside the sandbox
	Type string `json:"type"` // "file", "dir" or "symlink" (anything else, a FIFO or a device, is "file")
	Size int64  `json:"size"` // bytes
	Mode uint32 `json:"mode"` // permission bits (0o7777 at most)
	// Owner and Group are names from the sandbox's /etc/passwd and /etc/group, or the
	// number when it has none.
	Owner         string    `json:"owner"`
	Group         string    `json:"group"`
	ModTime       time.Time `json:"mod_time"`
	SymlinkTarget string    `json:"symlink_target,omitempty"`
}

// Entry types of EntryInfo.
const (
	EntryFile    = "file"
	EntryDir     = "dir"
	EntrySymlink = "symlink"
	// The special files: a named pipe, a Unix socket, a character and a block device.
	EntryFIFO        = "fifo"
	EntrySocket      = "socket"
	EntryCharDevice  = "chardev"
	EntryBlockDevice = "blockdev"
)

// FsEvent is one change under a watched directory.
type FsEvent struct {
	// Name is the changed entry's path relative to the watched directory.
	Name string `json:"name"`
	Op   string `json:"op"` // "create", "write", "remove", "rename" or "chmod"
}

// UserInfo is a user of the sandbox's /etc/passwd.
type UserInfo struct {
	Name string `json:"name"`
	UID  uint32 `json:"uid"`
	GID  uint32 `json:"gid"`
	Home string `json:"home"`
}

// Bounds of the process table and the filesystem operations.
const (
	// MaxDirEntries bounds one ListDir: more entries than this (at the depth asked) is an
	// error rather than a silent cut.
	MaxDirEntries = 10000
	// MaxDirDepth is the deepest ListDir.
	MaxDirDepth = 64
	// MaxWatchDirs bounds the directories one recursive watch covers.
	MaxWatchDirs = 8192
	// MaxOpenStreams bounds the long-lived streams (connected processes, watches) open on one
	// guest channel at once; the channel's HTTP/2 connection carries at most
	// maxChannelStreams requests, and the rest are for ordinary calls.
	MaxOpenStreams = 64
	// MaxInputBytes bounds one SendInput.
	MaxInputBytes = 8 << 20
)
