package wire

import "time"

// The function and secret routes, their bodies and statuses are in api/openapi.yaml (the
// contract), served by the daemon at GET /v1/openapi.json.

// Bounds of the function routes.
const (
	MaxBundleBytes = 64 << 20 // a deployed bundle (compressed), bytes
	MaxLogsLimit   = 10000    // the largest ?limit= of the logs route
)

// DeployResult is the answer of a deploy.
type DeployResult struct {
	Name      string  `json:"name"`
	Version   string  `json:"version"`
	Unchanged bool    `json:"unchanged"` // the same version was already active
	Mode      string  `json:"mode"`      // fork, spawn or worker
	Fallback  string  `json:"fallback,omitempty"`
	Checks    []Check `json:"checks,omitempty"`
	ReadyMs   int64   `json:"ready_ms"` // import + warm-up, milliseconds
}

// Check is one finding of a deploy's warm-up (a fork-safety check).
type Check struct {
	Name   string `json:"name"`
	Level  string `json:"level"` // "info" or "warn"
	Detail string `json:"detail"`
}

// Function is one deployed function, as GET /v1/functions lists it.
type Function struct {
	Name        string    `json:"name"`
	Version     string    `json:"version"`
	Runtime     string    `json:"runtime"` // python or node
	Mode        string    `json:"mode"`    // fork, spawn or worker
	State       string    `json:"state"`   // starting, ready, restarting, failed, spawn
	Fallback    string    `json:"fallback,omitempty"`
	ZygotePID   int       `json:"zygote_pid,omitempty"` // host pid
	InFlight    int       `json:"in_flight"`
	IdleWorkers int       `json:"idle_workers,omitempty"` // ready Node workers
	Served      int64     `json:"served"`
	Manifest    *Manifest `json:"manifest"`
}

// Manifest is a function's zygo.toml as the daemon validated it (defaults filled in).
type Manifest struct {
	Name        string            `json:"name"`
	Runtime     string            `json:"runtime"`
	Handler     string            `json:"handler"`
	Mode        string            `json:"mode"`
	Interpreter string            `json:"interpreter"`
	Secrets     []string          `json:"secrets,omitempty"`
	Strict      bool              `json:"strict"`
	Concurrency int               `json:"concurrency"`
	PreFork     *int              `json:"prefork,omitempty"`
	PoolSize    *int              `json:"pool_size,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	Limits      FunctionLimits    `json:"limits"`
}

// FunctionLimits are a function's per-request limits.
type FunctionLimits struct {
	TimeoutMs      int `json:"timeout_ms"` // wall time, milliseconds
	MemoryMiB      int `json:"memory_mib"`
	PIDs           int `json:"pids,omitempty"`
	CPUMs          int `json:"cpu_ms,omitempty"` // CPU time, milliseconds
	MaxRequestKiB  int `json:"max_request_kib"`
	MaxResponseKiB int `json:"max_response_kib"`
}

// LogLine is one line a function's request printed, or one of Zygo's reports about it.
type LogLine struct {
	ID        int64     `json:"id"`
	Function  string    `json:"function"`
	Version   string    `json:"version"`
	RequestID string    `json:"request_id,omitempty"`
	Stream    string    `json:"stream"` // "stdout", "stderr" or "zygo"
	At        time.Time `json:"at"`
	Line      string    `json:"line"`
}

// LogsBody is the answer of GET /v1/functions/{name}/logs.
type LogsBody struct {
	Lines []LogLine `json:"lines"`
	Next  int64     `json:"next"` // pass as ?after= to continue
}

// SecretMeta is one secret as listed: its name and when it was set, never its value.
type SecretMeta struct {
	Name      string    `json:"name"`
	UpdatedAt time.Time `json:"updated_at"`
}
