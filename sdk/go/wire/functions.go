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
	// Warnings are sentences for whoever deploys, such as limits this daemon cannot enforce
	// (it is not root); the CLI prints each.
	Warnings []string `json:"warnings,omitempty"`
}

// DeployStreamType is the media type a client sends in Accept to have a deploy or a function
// rollback answer with DeployEvents, one JSON object a line.
const DeployStreamType = "application/x-ndjson"

// Deploy steps, in order (DeployEvent.Step). A rollback has no uploading or unpacking.
const (
	StepUploading = "uploading" // the bundle is being received and checked
	StepUnpacking = "unpacking" // the version's files are being stored
	StepImporting = "importing" // its sandbox is starting and importing the code
	StepWarmup    = "warmup"    // imported; Checks has the warm-up findings; traffic not moved yet
	StepReady     = "ready"     // traffic has moved; the previous version drains
)

// DeployEvent is one line of a streamed deploy or rollback (Accept: DeployStreamType): a
// Step line for each step reached, then one line with Result (success) or Error (failure)
// and the HTTP status the plain call would have had. A deploy refused before its bundle is
// checked (a bad archive or manifest) is a plain error answer instead, with its status.
type DeployEvent struct {
	Step    string        `json:"step,omitempty"`
	Version string        `json:"version,omitempty"` // the version being deployed; "" while uploading
	Checks  []Check       `json:"checks,omitempty"`  // StepWarmup
	Result  *DeployResult `json:"result,omitempty"`
	Error   *ErrorBody    `json:"error,omitempty"`
	Status  int           `json:"status,omitempty"` // with Result or Error
}

// RollbackFunctionBody is the body of POST /v1/functions/{name}/rollback; an empty body is
// {} (the version active before the current one).
type RollbackFunctionBody struct {
	// To is the version's hash or a unique prefix of it, with or without "sha256:"; "" is the
	// version that was active before the current one.
	To string `json:"to,omitempty"`
}

// Version is one stored version of a function.
type Version struct {
	Hash       string    `json:"hash"`        // "sha256:<hex>"
	CreatedAt  time.Time `json:"created_at"`  // first stored
	DeployedAt time.Time `json:"deployed_at"` // last made active
	Active     bool      `json:"active"`
}

// Check is one finding of a deploy's warm-up (a fork-safety check).
type Check struct {
	Name   string `json:"name"`
	Level  string `json:"level"` // "info" or "warn"
	Detail string `json:"detail"`
}

// Function is one deployed function, as GET /v1/functions lists it.
type Function struct {
	Name      string `json:"name"`
	Version   string `json:"version"`
	Runtime   string `json:"runtime"` // python or node
	Mode      string `json:"mode"`    // fork, spawn or worker
	State     string `json:"state"`   // deploying (first version starting), starting, ready, restarting, failed
	Fallback  string `json:"fallback,omitempty"`
	ZygotePID int    `json:"zygote_pid,omitempty"` // host pid
	InFlight  int    `json:"in_flight"`
	Queued    int    `json:"queued"` // requests waiting for a concurrency slot
	// Deploying is the version a deploy or rollback is starting in place of Version; "" when
	// none (a first deploy is State "deploying" instead).
	Deploying   string    `json:"deploying,omitempty"`
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
	Queue       int               `json:"queue"` // requests that may wait beyond concurrency
	PreFork     *int              `json:"prefork,omitempty"`
	PoolSize    *int              `json:"pool_size,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	Limits      FunctionLimits    `json:"limits"`
	// PythonPath are the bundle's directories put on sys.path after the code (python_path).
	PythonPath []string `json:"python_path,omitempty"`
}

// FunctionLimits are a function's per-request limits.
type FunctionLimits struct {
	TimeoutMs      int `json:"timeout_ms"` // wall time, milliseconds
	MemoryMiB      int `json:"memory_mib"`
	PIDs           int `json:"pids,omitempty"`
	CPUMs          int `json:"cpu_ms,omitempty"` // CPU time, milliseconds
	MaxRequestKiB  int `json:"max_request_kib"`
	MaxResponseKiB int `json:"max_response_kib"`
	// ImportTimeoutMs bounds each sandbox start (import + warm-up), milliseconds; 0: the
	// daemon's --ready-timeout.
	ImportTimeoutMs int `json:"import_timeout_ms,omitempty"`
}

// LogLine is one line a function's request printed, or one of Zygo's reports about it.
type LogLine struct {
	ID        int64     `json:"id"`
	Function  string    `json:"function"`
	Version   string    `json:"version"`
	RequestID string    `json:"request_id,omitempty"`
	CallerID  string    `json:"caller_id,omitempty"` // the caller's X-Request-Id or trace id (Zygo's lines of the request)
	Stream    string    `json:"stream"`              // "stdout", "stderr" or "zygo"
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
