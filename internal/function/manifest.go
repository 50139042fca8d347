// Package function holds what Zygo knows about a warm function: its manifest
// (zygo.toml), the immutable bundle of its code (a content-hashed version),
// and the Manager that deploys versions and dispatches requests to their
// zygotes.
//
// Deploy walk-through: Manager.Deploy parses and validates the manifest,
// stores the bundle under its content hash, starts a zygote for it and waits
// for READY, then switches traffic to it and drains the old version
// (reporting each step to a WithProgress context); Rollback does the same
// from a stored version. Invoke picks the active version of a function,
// takes one of its concurrency slots (waiting in its bounded queue, or
// refused with a QueueFullError), and runs one request on a fresh child of
// its zygote (or a fresh interpreter in spawn mode).
package function

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/network"
	"github.com/zygo-run/zygo/internal/secret"
)

// ManifestFile is the name of the manifest inside a function directory.
const ManifestFile = "zygo.toml"

// Runtime names the language agent that serves a function.
type Runtime string

const (
	RuntimePython Runtime = "python"
	RuntimeNode   Runtime = "node"
)

// Mode says how a request gets its process.
type Mode string

const (
	// ModeFork serves each request from a fork of the function's zygote.
	ModeFork Mode = "fork"
	// ModeSpawn starts a fresh interpreter for each request (cold start).
	ModeSpawn Mode = "spawn"
	// ModeWorker serves each request from a Node worker made ready ahead of
	// time (runtime "node" only, and its only mode).
	ModeWorker Mode = "worker"
)

// Limits are the per-request limits of a function, from the [limits] table,
// and the limits of each of its sandboxes' own cgroup (ZygoteMemoryMiB,
// ZygotePIDs: the zygote or agent with what its import starts). Zero means
// "not set" only for PIDs and CPUMs; the others get defaults.
type Limits struct {
	TimeoutMs      int `toml:"timeout_ms" json:"timeout_ms"`             // wall time per request, milliseconds
	MemoryMiB      int `toml:"memory_mib" json:"memory_mib"`             // memory per request, MiB
	PIDs           int `toml:"pids" json:"pids,omitempty"`               // processes/threads per request
	CPUMs          int `toml:"cpu_ms" json:"cpu_ms,omitempty"`           // CPU time per request, milliseconds
	MaxRequestKiB  int `toml:"max_request_kib" json:"max_request_kib"`   // event size, KiB
	MaxResponseKiB int `toml:"max_response_kib" json:"max_response_kib"` // result size, KiB
	// ZygoteMemoryMiB bounds the memory of one sandbox outside its requests:
	// the zygote (or spawned agent, or Node worker) with what its import
	// starts and, in fork mode, its idle pre-forked children. MiB.
	ZygoteMemoryMiB int `toml:"zygote_memory_mib" json:"zygote_memory_mib"`
	// ZygotePIDs bounds the processes and threads of that same group,
	// bwrap's own process included.
	ZygotePIDs int `toml:"zygote_pids" json:"zygote_pids"`
	// ImportTimeoutMs bounds each start of one of the function's sandboxes
	// (the import and the warm-up checks), milliseconds; 0 (unset) is the
	// daemon's --ready-timeout. A deploy or rollback whose import takes
	// longer fails naming it, and the previous version keeps serving.
	ImportTimeoutMs int `toml:"import_timeout_ms" json:"import_timeout_ms,omitempty"`
}

// Manifest is a parsed and validated zygo.toml.
type Manifest struct {
	Name    string  `toml:"name" json:"name"`
	Runtime Runtime `toml:"runtime" json:"runtime"`
	// Handler is "module:function" for Python, "file.js:export" for Node.
	Handler string `toml:"handler" json:"handler"`
	Mode    Mode   `toml:"mode" json:"mode"`
	// Interpreter is the absolute path of the interpreter the function runs
	// on; default /usr/bin/python3 for Python and /usr/bin/node for Node.
	Interpreter string   `toml:"interpreter" json:"interpreter"`
	Secrets     []string `toml:"secrets" json:"secrets,omitempty"`
	Strict      bool     `toml:"strict" json:"strict"`
	Concurrency int      `toml:"concurrency" json:"concurrency"` // requests in flight at once
	// Queue is how many requests beyond Concurrency wait for a slot (0..
	// MaxQueue; default 2 × Concurrency); a request beyond that is refused
	// at once (errdefs.ErrTooManyRequests, HTTP 429 with Retry-After). 0
	// queues none. Time in the queue counts against limits.timeout_ms.
	Queue *int `toml:"queue" json:"queue,omitempty"`
	// PreFork is the ceiling of children a Python zygote keeps forked ahead
	// of demand (0 turns pre-forking off).
	PreFork *int `toml:"prefork" json:"prefork,omitempty"`
	// PoolSize is how many Node workers are kept ready (runtime "node");
	// 0 starts a fresh worker for each request (cold).
	PoolSize *int              `toml:"pool_size" json:"pool_size,omitempty"`
	Env      map[string]string `toml:"env" json:"env,omitempty"`
	Limits   Limits            `toml:"limits" json:"limits"`
	// OnNativeRandom is what a fork-mode Python function does when warm-up
	// finds a native library that drew OS randomness before the first fork
	// and that the agent cannot reseed (check native_random): "warn" (the
	// default) reports it and keeps forking; "spawn" falls back to a fresh
	// interpreter per request, as when threads are alive.
	OnNativeRandom string  `toml:"on_native_random" json:"on_native_random,omitempty"`
	Network        Network `toml:"network" json:"network"`
	// PythonPath lists directories of the bundle (relative, clean, inside it) that a Python
	// function's agent puts on sys.path right after the code directory, before the import:
	// dependencies shipped with the function (python_path = ["vendor"]). Then come the
	// entries of [env] PYTHONPATH. ReadBundle checks that each is a directory of the bundle.
	PythonPath []string `toml:"python_path" json:"python_path,omitempty"`
}

// Network is the [network] table: what a function's sandboxes may reach.
type Network struct {
	// Egress is "none" (the default: no interface but a private loopback,
	// as before networking existed) or "allow": the function's sandboxes
	// share one network namespace of their own with an address, NAT to the
	// outside and a DNS forwarder (internal/network).
	Egress string `toml:"egress" json:"egress"`
	// Allow, when not empty, lists the only IPv4 CIDRs reachable; Deny
	// lists CIDRs refused even inside Allow. Neither may open what no
	// function may ever reach (the host, other functions and sandboxes,
	// link-local and metadata ranges): an Allow overlapping those is
	// refused. Only with egress = "allow".
	Allow []string `toml:"allow" json:"allow,omitempty"`
	Deny  []string `toml:"deny" json:"deny,omitempty"`
}

// Egress values.
const (
	EgressNone  = "none"
	EgressAllow = "allow"
)

// Endpoint returns the network spec of n, which Validate has accepted.
func (n Network) Endpoint(id string) network.EndpointSpec {
	allow, _ := parseCIDRs(n.Allow)
	deny, _ := parseCIDRs(n.Deny)
	return network.EndpointSpec{ID: id, Egress: n.Egress == EgressAllow, Allow: allow, Deny: deny}
}

// parseCIDRs parses IPv4 CIDRs; bad is the index of the first that is not
// one, or -1.
func parseCIDRs(in []string) (out []netip.Prefix, bad int) {
	for i, s := range in {
		p, err := netip.ParsePrefix(s)
		if err != nil || !p.Addr().Is4() {
			return nil, i
		}
		out = append(out, p)
	}
	return out, -1
}

func (n Network) validate(bad func(key, format string, a ...any) error) error {
	switch n.Egress {
	case EgressNone:
		if len(n.Allow)+len(n.Deny) > 0 {
			return bad("network.egress", "is \"none\": allow and deny apply only with egress = \"allow\"")
		}
		return nil
	case EgressAllow:
	default:
		return bad("network.egress", "%q is not one of none, allow", n.Egress)
	}
	allow, i := parseCIDRs(n.Allow)
	if i >= 0 {
		return bad(fmt.Sprintf("network.allow[%d]", i), "%q is not an IPv4 CIDR (for example 203.0.113.0/24)", n.Allow[i])
	}
	deny, i := parseCIDRs(n.Deny)
	if i >= 0 {
		return bad(fmt.Sprintf("network.deny[%d]", i), "%q is not an IPv4 CIDR (for example 203.0.113.0/24)", n.Deny[i])
	}
	if err := network.ValidateLists(allow, deny, nil); err != nil {
		return fmt.Errorf("zygo.toml: %w", err)
	}
	return nil
}

// OnNativeRandom values.
const (
	NativeRandomWarn  = "warn"
	NativeRandomSpawn = "spawn"
)

// Bounds on manifest values; the docs (README, ARCHITECTURE) repeat them.
const (
	DefaultTimeoutMs = 30_000
	MaxTimeoutMs     = 15 * 60_000
	DefaultMemoryMiB = 256
	// DefaultZygoteMemoryMiB leaves room for heavy imports (numpy, pandas,
	// a small model) while keeping a tenant's import from taking the host.
	DefaultZygoteMemoryMiB = 1024
	// DefaultZygotePIDs covers the agent and bwrap, a Node worker's threads
	// (about a dozen), MaxPreFork idle children and helpers an import starts.
	DefaultZygotePIDs  = 256
	MinZygotePIDs      = 8
	MaxPIDs            = 65_536
	MinMemoryMiB       = 16
	MaxMemoryMiB       = 65_536
	DefaultBodyKiB     = 6 * 1024
	MaxBodyKiB         = 64 * 1024
	DefaultConcurrency = 8
	MaxConcurrency     = 256
	MaxQueue           = 10_000
	// MinImportTimeoutMs and MaxImportTimeoutMs bound limits.import_timeout_ms
	// when set (0 is the daemon's --ready-timeout).
	MinImportTimeoutMs = 100
	MaxImportTimeoutMs = 30 * 60_000
	DefaultPoolSize    = 2
	DefaultPreFork     = 2
	MaxPreFork         = 64
	MaxPoolSize        = 64
	MaxEnvValueBytes   = 32 << 10  // one [env] value, bytes
	MaxEnvBytes        = 128 << 10 // all [env] keys and values together, bytes
	MaxPythonPath      = 32        // entries of python_path
)

var (
	nameRE        = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	pyHandlerRE   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$`)
	nodeHandlerRE = regexp.MustCompile(`^[A-Za-z0-9_./-]+\.(js|mjs|cjs):[A-Za-z_$][A-Za-z0-9_$]*$`)
	envKeyRE      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// tomlError is the toml package's parse error as one clause of Zygo's message: without its
// "toml: " prefix and its closing period ("line 2 (last key \"name\"): Key 'name' has
// already been defined"). It unwraps to the package's error.
type tomlError struct{ err error }

func (e tomlError) Error() string {
	return strings.TrimSuffix(strings.TrimPrefix(e.err.Error(), "toml: "), ".")
}

func (e tomlError) Unwrap() error { return e.err }

// ParseManifest decodes and validates a zygo.toml. Errors wrap
// errdefs.ErrInvalidArgument and name the offending key.
func ParseManifest(data []byte) (*Manifest, error) {
	var m Manifest
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&m)
	if err != nil {
		return nil, fmt.Errorf("%w: zygo.toml: %w", errdefs.ErrInvalidArgument, tomlError{err})
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = fmt.Sprintf("%q", k.String())
		}
		return nil, fmt.Errorf("%w: zygo.toml: unknown key %s", errdefs.ErrInvalidArgument, strings.Join(keys, ", "))
	}
	// The toml package decodes a non-table value into a map as an empty map,
	// without an error: `env = "FOO=bar"` would silently set nothing.
	if t := md.Type("env"); t != "" && t != "Hash" {
		return nil, fmt.Errorf("%w: zygo.toml: env: must be a table of strings ([env] FOO = \"bar\"), not %s", errdefs.ErrInvalidArgument, strings.ToLower(t))
	}
	m.applyDefaults()
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// LoadManifest reads DIR/zygo.toml and parses it.
func LoadManifest(dir string) (*Manifest, error) {
	data, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s has no %s", errdefs.ErrInvalidArgument, dir, ManifestFile)
		}
		return nil, fmt.Errorf("reading manifest: %w", err)
	}
	return ParseManifest(data)
}

// defaultInterpreter is the interpreter a function of runtime r runs on when zygo.toml
// names none: /usr/bin/node for Node, /usr/bin/python3 otherwise.
func defaultInterpreter(r Runtime) string {
	if r == RuntimeNode {
		return "/usr/bin/node"
	}
	return "/usr/bin/python3"
}

func (m *Manifest) applyDefaults() {
	if m.Mode == "" {
		m.Mode = ModeFork
		if m.Runtime == RuntimeNode {
			m.Mode = ModeWorker
		}
	}
	if m.Interpreter == "" {
		m.Interpreter = defaultInterpreter(m.Runtime)
	}
	if m.Concurrency == 0 {
		m.Concurrency = DefaultConcurrency
	}
	if m.Queue == nil {
		n := 2 * m.Concurrency
		m.Queue = &n
	}
	if m.Network.Egress == "" {
		m.Network.Egress = EgressNone
	}
	if m.OnNativeRandom == "" && m.Runtime == RuntimePython {
		m.OnNativeRandom = NativeRandomWarn
	}
	if m.PreFork == nil && m.Runtime == RuntimePython {
		n := DefaultPreFork
		m.PreFork = &n
	}
	if m.PoolSize == nil && m.Runtime == RuntimeNode {
		n := DefaultPoolSize
		m.PoolSize = &n
	}
	l := &m.Limits
	if l.TimeoutMs == 0 {
		l.TimeoutMs = DefaultTimeoutMs
	}
	if l.MemoryMiB == 0 {
		l.MemoryMiB = DefaultMemoryMiB
	}
	if l.MaxRequestKiB == 0 {
		l.MaxRequestKiB = DefaultBodyKiB
	}
	if l.MaxResponseKiB == 0 {
		l.MaxResponseKiB = DefaultBodyKiB
	}
	if l.ZygoteMemoryMiB == 0 {
		l.ZygoteMemoryMiB = DefaultZygoteMemoryMiB
	}
	if l.ZygotePIDs == 0 {
		l.ZygotePIDs = DefaultZygotePIDs
	}
}

// Validate checks every field and returns an error naming the first bad key,
// wrapping errdefs.ErrInvalidArgument.
func (m *Manifest) Validate() error {
	bad := func(key, format string, a ...any) error {
		return fmt.Errorf("%w: zygo.toml: %s: %s", errdefs.ErrInvalidArgument, key, fmt.Sprintf(format, a...))
	}
	if m.Name == "" {
		return bad("name", "is required")
	}
	if !nameRE.MatchString(m.Name) {
		return bad("name", "%q must be 1-63 of [a-z0-9-], starting with a letter or digit", m.Name)
	}
	switch m.Runtime {
	case RuntimePython:
		if !pyHandlerRE.MatchString(m.Handler) {
			return bad("handler", "%q must be module:function (for example main:handler)", m.Handler)
		}
	case RuntimeNode:
		if file := strings.SplitN(m.Handler, ":", 2)[0]; !nodeHandlerRE.MatchString(m.Handler) ||
			strings.HasPrefix(file, "/") || file != path.Clean(file) || strings.HasPrefix(file, "../") {
			return bad("handler", "%q must be file.js:export with a relative path inside the function (for example index.js:handler)", m.Handler)
		}
	case "":
		return bad("runtime", "is required (python or node)")
	default:
		return bad("runtime", "%q is not one of python, node", m.Runtime)
	}
	switch {
	case m.Runtime == RuntimeNode && m.Mode != ModeWorker:
		return bad("mode", "%q does not apply to runtime = \"node\": every Node request gets a fresh worker (mode \"worker\")", m.Mode)
	case m.Runtime != RuntimeNode && m.Mode != ModeFork && m.Mode != ModeSpawn:
		return bad("mode", "%q is not one of fork, spawn", m.Mode)
	}
	if !filepath.IsAbs(m.Interpreter) || filepath.Clean(m.Interpreter) != m.Interpreter {
		return bad("interpreter", "%q must be a clean absolute path", m.Interpreter)
	}
	if m.Concurrency < 1 || m.Concurrency > MaxConcurrency {
		return bad("concurrency", "%d is outside 1..%d", m.Concurrency, MaxConcurrency)
	}
	if m.Queue != nil && (*m.Queue < 0 || *m.Queue > MaxQueue) {
		return bad("queue", "%d is outside 0..%d (0: no queue, a request beyond concurrency is refused at once)", *m.Queue, MaxQueue)
	}
	if m.PreFork != nil && (*m.PreFork < 0 || *m.PreFork > MaxPreFork) {
		return bad("prefork", "%d is outside 0..%d", *m.PreFork, MaxPreFork)
	}
	if m.Runtime == RuntimeNode && m.PreFork != nil {
		return bad("prefork", "applies only to runtime = \"python\" (Node keeps pool_size workers)")
	}
	if m.Runtime == RuntimeNode && (*m.PoolSize < 0 || *m.PoolSize > MaxPoolSize) {
		return bad("pool_size", "%d is outside 0..%d", *m.PoolSize, MaxPoolSize)
	}
	if m.Runtime != RuntimeNode && m.PoolSize != nil {
		return bad("pool_size", "applies only to runtime = \"node\"")
	}
	switch {
	case m.Runtime == RuntimeNode && m.OnNativeRandom != "":
		return bad("on_native_random", "applies only to runtime = \"python\" (every Node request gets a fresh worker)")
	case m.Runtime == RuntimePython && m.OnNativeRandom != NativeRandomWarn && m.OnNativeRandom != NativeRandomSpawn:
		return bad("on_native_random", "%q is not one of warn, spawn", m.OnNativeRandom)
	}
	if m.Runtime == RuntimeNode && m.Strict {
		return bad("strict", "is not supported for runtime = \"node\" yet")
	}
	seen := map[string]bool{}
	for _, s := range m.Secrets {
		if secret.ValidName(s) != nil {
			return bad("secrets", "%q is not a valid secret name (%s)", s, secret.NamePattern)
		}
		if strings.HasPrefix(s, secret.TenantPrefix) {
			return bad("secrets", "%q: names beginning with %s are pool tenants' secrets, which no function may read", s, secret.TenantPrefix)
		}
		if seen[s] {
			return bad("secrets", "%q is listed twice", s)
		}
		seen[s] = true
	}
	if err := m.validateEnv(bad); err != nil {
		return err
	}
	if err := m.validatePythonPath(bad); err != nil {
		return err
	}
	if err := m.Limits.validate(bad); err != nil {
		return err
	}
	if err := m.Network.validate(bad); err != nil {
		return err
	}
	// bwrap, the zygote and each idle pre-forked child count in zygote_pids.
	if m.PreFork != nil && m.Limits.ZygotePIDs < *m.PreFork+zygoteOwnPIDs {
		return bad("limits.zygote_pids", "%d leaves no room for prefork = %d (bwrap, the zygote and each idle pre-forked child count: want at least %d)",
			m.Limits.ZygotePIDs, *m.PreFork, *m.PreFork+zygoteOwnPIDs)
	}
	return nil
}

// validatePythonPath checks python_path: Python only, at most MaxPythonPath entries, each a
// clean relative path that stays inside the function (no "..", not absolute, not "."),
// listed once. That each is a directory of the bundle is ReadBundle's check.
func (m *Manifest) validatePythonPath(bad func(key, format string, a ...any) error) error {
	if len(m.PythonPath) == 0 {
		return nil
	}
	if m.Runtime != RuntimePython {
		return bad("python_path", "applies only to runtime = \"python\" (Node resolves node_modules inside the function by itself)")
	}
	if len(m.PythonPath) > MaxPythonPath {
		return bad("python_path", "has %d entries, over the limit of %d", len(m.PythonPath), MaxPythonPath)
	}
	seen := map[string]bool{}
	for i, p := range m.PythonPath {
		key := fmt.Sprintf("python_path[%d]", i)
		switch {
		case p == "" || p == ".":
			return bad(key, "%q must name a directory inside the function (the function's own directory is on sys.path already)", p)
		case path.IsAbs(p):
			return bad(key, "%q must be a relative path inside the function (for example \"vendor\")", p)
		case path.Clean(p) != p || p == ".." || strings.HasPrefix(p, "../"):
			return bad(key, "%q must be a clean path that stays inside the function (no \"..\", \"./\" or trailing \"/\")", p)
		case len(p) > MaxPathBytes || strings.ContainsAny(p, "\x00:"):
			return bad(key, "%q is not a usable path (a NUL or \":\", or longer than %d bytes)", p, MaxPathBytes)
		case seen[p]:
			return bad(key, "%q is listed twice", p)
		}
		seen[p] = true
	}
	return nil
}

// zygoteOwnPIDs is what a zygote's group holds besides its idle children
// and what its import starts: bwrap, the agent, and a spare for a child
// being forked while another waits.
const zygoteOwnPIDs = 3

// validateEnv checks [env]: names, reserved names, and values that execve
// could not pass (a NUL byte) or that are over MaxEnvValueBytes, or all
// together over MaxEnvBytes.
func (m *Manifest) validateEnv(bad func(key, format string, a ...any) error) error {
	total := 0
	for _, k := range slices.Sorted(maps.Keys(m.Env)) {
		v := m.Env[k]
		if len(k) > 128 {
			return bad("env", "a variable name is longer than 128 bytes")
		}
		if !envKeyRE.MatchString(k) {
			return bad("env."+k, "is not a valid environment variable name")
		}
		if reservedEnv(k) {
			return bad("env."+k, "is reserved by Zygo")
		}
		if strings.IndexByte(v, 0) >= 0 {
			return bad("env."+k, "contains a NUL byte, which an environment variable cannot hold")
		}
		if len(v) > MaxEnvValueBytes {
			return bad("env."+k, "is %d bytes, over the limit of %d", len(v), MaxEnvValueBytes)
		}
		total += len(k) + len(v) + 2
	}
	if total > MaxEnvBytes {
		return bad("env", "is %d bytes in all, over the limit of %d", total, MaxEnvBytes)
	}
	return nil
}

func (l *Limits) validate(bad func(key, format string, a ...any) error) error {
	type rng struct {
		key       string
		v, lo, hi int
	}
	for _, r := range []rng{
		{"limits.timeout_ms", l.TimeoutMs, 1, MaxTimeoutMs},
		{"limits.memory_mib", l.MemoryMiB, MinMemoryMiB, MaxMemoryMiB},
		{"limits.pids", l.PIDs, 0, MaxPIDs},
		{"limits.cpu_ms", l.CPUMs, 0, MaxTimeoutMs},
		{"limits.max_request_kib", l.MaxRequestKiB, 1, MaxBodyKiB},
		{"limits.max_response_kib", l.MaxResponseKiB, 1, MaxBodyKiB},
		{"limits.zygote_memory_mib", l.ZygoteMemoryMiB, MinMemoryMiB, MaxMemoryMiB},
		{"limits.zygote_pids", l.ZygotePIDs, MinZygotePIDs, MaxPIDs},
	} {
		if r.v < r.lo || r.v > r.hi {
			return bad(r.key, "%d is outside %d..%d", r.v, r.lo, r.hi)
		}
	}
	if t := l.ImportTimeoutMs; t != 0 && (t < MinImportTimeoutMs || t > MaxImportTimeoutMs) {
		return bad("limits.import_timeout_ms", "%d is outside %d..%d (leave it out for the daemon's --ready-timeout)", t, MinImportTimeoutMs, MaxImportTimeoutMs)
	}
	return nil
}

// reservedEnv reports whether an environment variable is set by Zygo itself
// and may not be overridden by a manifest.
func reservedEnv(k string) bool {
	switch k {
	case "TMPDIR", "HOME", "PATH":
		return true
	}
	return strings.HasPrefix(k, "ZYGO_") || strings.HasPrefix(k, "LD_")
}

// QueueLen returns how many requests may wait for a concurrency slot:
// queue, or its default (2 × concurrency) for a manifest stored before the
// key existed.
func (m *Manifest) QueueLen() int {
	if m.Queue == nil {
		return 2 * m.Concurrency
	}
	return *m.Queue
}

// SortedEnv returns the manifest's environment as sorted KEY=VALUE pairs.
func (m *Manifest) SortedEnv() []string {
	out := make([]string, 0, len(m.Env))
	for k, v := range m.Env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
