package wire

import (
	"encoding/json"
	"time"
)

// The runtime pool routes (docs/protocol.md, "Runtime pools"):
//
//	POST   /v1/pools                        body: the pool's zygo.toml (kind = "pool") → 201 PoolUpResult (200 when unchanged)
//	GET    /v1/pools                        ?limit=N&cursor=C → PoolPage
//	GET    /v1/pools/{name}                 Pool
//	DELETE /v1/pools/{name}                 204
//	PUT    /v1/pools/{name}/scripts         ?tenant=T, body: one file (stored as main.py) or, with
//	                                        Content-Type application/x-tar, a tar (gzip'd or not) of a dir → 201 ScriptResult
//	POST   /v1/pools/{name}/run             PoolRunRequest → the entry point's value; headers RequestIDHeader,
//	                                        ScriptHeader, LaneHeader, DurationHeader; 429 too_many_requests with Retry-After
//	GET    /v1/pools/{name}/logs            ?request=ID&after=N&limit=N → LogsBody

// Pool headers and content types.
const (
	ScriptHeader   = "X-Zygo-Script"         // run: the hash of the script that ran
	LaneHeader     = "X-Zygo-Lane"           // run: the zygote that served it: shared or tenant:T
	MountedHeader  = "X-Zygo-Script-Mounted" // run: "false" when the script was copied, not mounted (see the logs)
	TarContentType = "application/x-tar"
)

// PoolUpResult is the answer of POST /v1/pools.
type PoolUpResult struct {
	Name      string  `json:"name"`
	Unchanged bool    `json:"unchanged"`
	Isolation string  `json:"isolation"`
	Fallback  string  `json:"fallback,omitempty"`
	Checks    []Check `json:"checks,omitempty"` // the shared zygote's warm-up (isolation "shared")
}

// PoolLane is one zygote of a pool.
type PoolLane struct {
	Lane     string `json:"lane"`  // "shared" or "tenant:T"
	State    string `json:"state"` // starting, ready, failed
	HostPID  int    `json:"host_pid,omitempty"`
	InFlight int    `json:"in_flight"`
}

// Pool is one pool as GET /v1/pools lists it.
type Pool struct {
	Name              string         `json:"name"`
	Isolation         string         `json:"isolation"`
	Preload           []string       `json:"preload"`
	Interpreter       string         `json:"interpreter"`
	Concurrency       int            `json:"concurrency"`
	TenantConcurrency int            `json:"tenant_concurrency"`
	TenantQueue       int            `json:"tenant_queue"`
	TenantIdleS       int            `json:"tenant_idle_s"`
	Strict            bool           `json:"strict"`
	Limits            FunctionLimits `json:"limits"`
	Lanes             []PoolLane     `json:"lanes"`
	Running           int            `json:"running"`
	Waiting           int            `json:"waiting"`
	Tenants           int            `json:"tenants"`
	Fallback          string         `json:"fallback,omitempty"`
	Created           time.Time      `json:"created"`
}

// PoolPage is one page of GET /v1/pools.
type PoolPage struct {
	Items      []Pool `json:"items"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// ScriptResult is the answer of PUT /v1/pools/{name}/scripts.
type ScriptResult struct {
	Tenant string `json:"tenant"`
	Hash   string `json:"hash"`
}

// PoolRunRequest is the body of POST /v1/pools/{name}/run. Exactly one of Script
// (a stored script's hash) and Source (an inline main.py, stored like an upload) is set.
type PoolRunRequest struct {
	Tenant  string          `json:"tenant"`
	Script  string          `json:"script,omitempty"`
	Source  string          `json:"source,omitempty"`
	Entry   string          `json:"entry,omitempty"` // MODULE:FUNCTION, default main:handler
	Event   json.RawMessage `json:"event,omitempty"`
	Secrets []string        `json:"secrets,omitempty"` // the tenant's secrets (zygo secret set --tenant)
}
