// Package pool holds runtime pools: a zygote that imports a runtime's heavy
// libraries (preload) and no tenant code, serving scripts that tenants
// upload (content-addressed, per tenant) and that load in the forked child
// of each request.
//
// Walk-through: Manager.Up parses the pool's zygo.toml (kind = "pool"),
// writes the generated boot module (the preload imports), and starts the
// shared lane: a function.Runner of kind fork (internal/function) whose
// handler is the agent's pool loader. PutScript stores a tenant's script
// under its hash. Run admits the request under the tenant's caps
// (fairness.go), picks a lane (the shared zygote, or the tenant's own when
// isolation = "zygote-per-tenant" or the request carries secrets:
// lanes.go), makes a detached read-only mount of the script's directory
// (mount.go) and runs the request with it attached to GO.
package pool

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/function"
)

// Kind is the manifest's kind for a pool.
const Kind = "pool"

// Isolation values.
const (
	// IsolationShared: one zygote serves every tenant's requests that carry
	// no secrets (the default); tenants then share its address layout.
	IsolationShared = "shared"
	// IsolationPerTenant: each tenant gets its own zygote, started on its
	// first request and stopped when idle (TenantLimits.IdleS).
	IsolationPerTenant = "zygote-per-tenant"
)

// Defaults of the [tenant] table.
const (
	DefaultTenantConcurrency = 4
	DefaultTenantQueue       = 16
	DefaultTenantIdleS       = 60
	DefaultPoolConcurrency   = 16
	// MaxPreload bounds the modules a pool preloads.
	MaxPreload = 64
)

// TenantLimits is the [tenant] table: what each tenant may hold of a pool.
type TenantLimits struct {
	// Concurrency is how many of one tenant's requests run at once.
	Concurrency int `toml:"concurrency" json:"concurrency"`
	// Queue is how many of one tenant's requests may wait for a slot;
	// beyond it a request is refused at once (429 too_many_requests).
	Queue int `toml:"queue" json:"queue"`
	// IdleS is how long, seconds, a tenant's own zygote is kept without a
	// request before it is stopped.
	IdleS int `toml:"idle_s" json:"idle_s"`
}

// Manifest is a parsed and validated pool zygo.toml.
type Manifest struct {
	Kind    string   `toml:"kind" json:"kind"`
	Name    string   `toml:"name" json:"name"`
	Runtime string   `toml:"runtime" json:"runtime"`
	Preload []string `toml:"preload" json:"preload"`
	// Isolation is IsolationShared or IsolationPerTenant.
	Isolation   string            `toml:"isolation" json:"isolation"`
	Interpreter string            `toml:"interpreter" json:"interpreter"`
	Strict      bool              `toml:"strict" json:"strict"`
	Concurrency int               `toml:"concurrency" json:"concurrency"` // requests in flight, all tenants
	PreFork     *int              `toml:"prefork" json:"prefork,omitempty"`
	Env         map[string]string `toml:"env" json:"env,omitempty"`
	Limits      function.Limits   `toml:"limits" json:"limits"`
	Tenant      TenantLimits      `toml:"tenant" json:"tenant"`
}

var moduleRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// IsPool reports whether data is a manifest with kind = "pool" (any
// decoding error: false; ParseManifest says what is wrong).
func IsPool(data []byte) bool {
	var k struct {
		Kind string `toml:"kind"`
	}
	_, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&k)
	return err == nil && k.Kind == Kind
}

// ParseManifest decodes and validates a pool's zygo.toml. Errors wrap
// errdefs.ErrInvalidArgument and name the key.
func ParseManifest(data []byte) (*Manifest, error) {
	var m Manifest
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&m)
	if err != nil {
		return nil, fmt.Errorf("%w: zygo.toml: %s", errdefs.ErrInvalidArgument, strings.TrimPrefix(err.Error(), "toml: "))
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = fmt.Sprintf("%q", k.String())
		}
		return nil, fmt.Errorf("%w: zygo.toml: unknown key %s", errdefs.ErrInvalidArgument, strings.Join(keys, ", "))
	}
	m.applyDefaults()
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

func (m *Manifest) applyDefaults() {
	if m.Runtime == "" {
		m.Runtime = string(function.RuntimePython)
	}
	if m.Isolation == "" {
		m.Isolation = IsolationShared
	}
	if m.Interpreter == "" {
		m.Interpreter = "/usr/bin/python3"
	}
	if m.Concurrency == 0 {
		m.Concurrency = DefaultPoolConcurrency
	}
	if m.PreFork == nil {
		n := function.DefaultPreFork
		m.PreFork = &n
	}
	t := &m.Tenant
	if t.Concurrency == 0 {
		t.Concurrency = min(DefaultTenantConcurrency, m.Concurrency)
	}
	if t.Queue == 0 {
		t.Queue = DefaultTenantQueue
	}
	if t.IdleS == 0 {
		t.IdleS = DefaultTenantIdleS
	}
	l := &m.Limits
	for _, d := range []struct {
		v   *int
		def int
	}{{&l.TimeoutMs, function.DefaultTimeoutMs}, {&l.MemoryMiB, function.DefaultMemoryMiB},
		{&l.MaxRequestKiB, function.DefaultBodyKiB}, {&l.MaxResponseKiB, function.DefaultBodyKiB},
		{&l.ZygoteMemoryMiB, function.DefaultZygoteMemoryMiB}, {&l.ZygotePIDs, function.DefaultZygotePIDs}} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
}

// Validate checks every key and returns an error naming the first bad one,
// wrapping errdefs.ErrInvalidArgument. The limits, env, interpreter and
// prefork are checked by the function manifest's own rules
// (FunctionManifest).
func (m *Manifest) Validate() error {
	bad := func(key, format string, a ...any) error {
		return fmt.Errorf("%w: zygo.toml: %s: %s", errdefs.ErrInvalidArgument, key, fmt.Sprintf(format, a...))
	}
	switch {
	case m.Kind != Kind:
		return bad("kind", "%q must be %q for a pool", m.Kind, Kind)
	case m.Runtime == string(function.RuntimeNode):
		return bad("runtime", "pools are Python-only for now: a Node pool would need a script per worker, and Node workers load their handler before the request is known (use a function per script)")
	case m.Runtime != string(function.RuntimePython):
		return bad("runtime", "%q must be \"python\"", m.Runtime)
	case m.Isolation != IsolationShared && m.Isolation != IsolationPerTenant:
		return bad("isolation", "%q must be %q or %q", m.Isolation, IsolationShared, IsolationPerTenant)
	case len(m.Preload) > MaxPreload:
		return bad("preload", "%d modules: at most %d", len(m.Preload), MaxPreload)
	case m.Concurrency < 1 || m.Concurrency > 1024:
		return bad("concurrency", "%d must be between 1 and 1024", m.Concurrency)
	case m.Tenant.Concurrency < 1 || m.Tenant.Concurrency > m.Concurrency:
		return bad("tenant.concurrency", "%d must be between 1 and concurrency (%d)", m.Tenant.Concurrency, m.Concurrency)
	case m.Tenant.Queue < 0 || m.Tenant.Queue > 10_000:
		return bad("tenant.queue", "%d must be between 0 and 10000", m.Tenant.Queue)
	case m.Tenant.IdleS < 1 || m.Tenant.IdleS > 86_400:
		return bad("tenant.idle_s", "%d must be between 1 and 86400 seconds", m.Tenant.IdleS)
	}
	for i, p := range m.Preload {
		if !moduleRE.MatchString(p) || len(p) > 255 {
			return bad(fmt.Sprintf("preload[%d]", i), "%q is not a module name (for example numpy or os.path)", p)
		}
	}
	_, err := m.FunctionManifest(nil)
	return err
}

// BootModule is the module of a pool's generated code directory whose
// import is the pool's import.
const BootModule = "zygo_pool_boot"

// FunctionManifest returns the function manifest the pool's zygotes run
// with: the boot module as handler, the pool's interpreter, env, limits,
// prefork and strict; secrets, when not nil, bind /run/secrets (a tenant's
// lane). Errors: the function manifest's, naming the key.
func (m *Manifest) FunctionManifest(secrets []string) (*function.Manifest, error) {
	fm := &function.Manifest{
		Name: m.Name, Runtime: function.RuntimePython, Handler: BootModule + ":handler",
		Mode: function.ModeFork, Interpreter: m.Interpreter, Secrets: secrets, Strict: m.Strict,
		Concurrency: m.Concurrency, PreFork: m.PreFork, Env: m.Env, Limits: m.Limits,
		OnNativeRandom: function.NativeRandomWarn, Network: function.Network{Egress: function.EgressNone},
	}
	if err := fm.Validate(); err != nil {
		return nil, err
	}
	return fm, nil
}

// bootSource returns the boot module's text: the preload imports and the
// agent's pool loader as handler. Module names are checked by Validate.
func (m *Manifest) bootSource() []byte {
	var b strings.Builder
	b.WriteString("# Generated by zygo for pool " + m.Name + ": the pool's import, no tenant code.\n")
	for _, p := range m.Preload {
		b.WriteString("import " + p + "\n")
	}
	b.WriteString("from zygo_agent.pool import handler  # noqa: F401\n")
	return []byte(b.String())
}
