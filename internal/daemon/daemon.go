// Package daemon is Zygo's composition root: it wires the store, the
// function manager, the sandbox manager (sandboxes.go) and the HTTP API
// together and runs them until its context ends. Only cmd/zygo (through
// internal/cli) and end-to-end tests may import it; every other package
// receives its dependencies as interfaces.
package daemon

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/zygo-run/zygo/agents"
	"github.com/zygo-run/zygo/internal/agentproc"
	"github.com/zygo-run/zygo/internal/api"
	"github.com/zygo-run/zygo/internal/cgroup"
	"github.com/zygo-run/zygo/internal/function"
	"github.com/zygo-run/zygo/internal/hostid"
	"github.com/zygo-run/zygo/internal/metrics"
	"github.com/zygo-run/zygo/internal/sandbox"
	"github.com/zygo-run/zygo/internal/sandbox/gvisor"
	"github.com/zygo-run/zygo/internal/secret"
	"github.com/zygo-run/zygo/internal/store"
	"github.com/zygo-run/zygo/internal/trusted"
	"github.com/zygo-run/zygo/internal/untrusted"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// Version is the daemon's build version, set by the linker or left "dev".
var Version = "dev"

// Config is the daemon's configuration, validated by Run.
type Config struct {
	StateDir string // holds zygo.db, zygo.sock, versions/, run/, agents/
	// Listen is an optional TCP address served in addition to the unix
	// socket: a loopback one (127.0.0.1:PORT, [::1]:PORT or localhost:PORT,
	// which means 127.0.0.1) in plain HTTP, or, with TLSCert and TLSKey, any
	// (HOST:PORT, :PORT for every interface) in TLS; port 0 picks a free one,
	// logged at start. Every call on it must carry a bearer token: the one of
	// TokenPath (named "default", created on first use) or one of `zygo token
	// create` (api.Tokens).
	Listen string
	// TLSCert and TLSKey are PEM files of the certificate (chain) and private
	// key the Listen address serves TLS with; both or neither. They are read
	// at start (restart the daemon to serve a renewed certificate).
	TLSCert, TLSKey string
	tlsConfig       *tls.Config // from TLSCert and TLSKey, made by validate
	// Bwrap is the bubblewrap binary; "" looks it up on PATH.
	Bwrap string
	// UIDRange is the block of host uids (and gids of the same numbers) the
	// daemon owns, as START-END or START:COUNT (internal/hostid): each
	// function runs as one of them that nothing else shares. "" and "auto"
	// choose the first free block of 65536 among hostid.AutoBlocks from
	// hostid.Default, the one of the last run first (recorded in the store).
	// The range is claimed on the host while the daemon runs
	// (hostid.ClaimRange, in UIDClaimDir) and refused when another live
	// daemon claims an overlapping one, when an account of HostFiles or a
	// subordinate range falls in it, or when a host process not of this
	// daemon runs as one of its ids. A daemon that is not root cannot switch
	// uids: its sandboxes run as its own uid and UIDRange is unused.
	UIDRange string
	// UIDClaimDir is where the range is claimed; "" is hostid.ClaimDir.
	UIDClaimDir string
	// HostFiles are the account databases UIDRange is checked against; the
	// zero value is hostid.SystemFiles (tests point it at their own).
	HostFiles hostid.HostFiles
	// RunTmpfsMiB caps each of the two tmpfs the daemon mounts for each
	// zygote: its run directory (request files, /run/secrets) and, inside
	// it, its /tmp and /dev/shm; 0 is 256 MiB.
	RunTmpfsMiB  int
	ReadyTimeout time.Duration // per zygote import + warm-up; default 60 s
	// KeepVersions is how many versions of each function are kept, the
	// active one included (function.Config.KeepVersions); 0 is
	// function.DefaultKeepVersions, else 1..MaxKeepVersions.
	KeepVersions int
	uidRange     store.IDRange // UIDRange parsed by validate (root only), then the claimed one
	uidAuto      bool          // UIDRange is "" or "auto"
	// RandGuard is the native-randomness guard (bin/zygo_rand.so, built by
	// `make build`); "" looks for RandGuardName next to the zygo binary.
	RandGuard string
	// NoHugePages keeps fork-mode Python zygotes' code and heap on small
	// pages (function.Config.NoHugePages).
	NoHugePages bool
	// Sandbox configures the gVisor sandboxes (sandboxes.go).
	Sandbox SandboxConfig
	// Network configures networking (network.go).
	Network NetworkConfig
	// MetricsListen is an optional loopback TCP address (as Listen) serving
	// only GET /metrics, without a token: for a Prometheus on this host that
	// should not hold the API's token. Every local user can read it (function
	// names and counts, never code, events or secrets).
	MetricsListen string
	// E2B is an optional TCP address serving E2B's API (internal/e2b; e2b.go): loopback in
	// plain HTTP, any other only with TLSCert and TLSKey, as Listen. Its API keys are the
	// API tokens.
	E2B string
	// LogRetentionLines is how many log lines each function keeps, its newest
	// (1..store.MaxLogRetentionLines); 0 is store.DefaultLogRetentionLines.
	LogRetentionLines int
	Log               *slog.Logger
}

// MaxKeepVersions bounds --keep-versions.
const MaxKeepVersions = 1000

// SocketPath returns the daemon's unix socket inside stateDir.
func SocketPath(stateDir string) string { return filepath.Join(stateDir, zygo.SocketName) }

// TokenPath returns the file inside stateDir holding the bearer token that
// calls on the --listen TCP address must carry (mode 0600, made by the
// daemon; see api.LoadToken).
func TokenPath(stateDir string) string { return filepath.Join(stateDir, zygo.TokenName) }

// DefaultStateDir follows the XDG base directory spec for a user
// ($XDG_STATE_HOME/zygo, else ~/.local/state/zygo) and uses /var/lib/zygo
// for root. It is zygo.DefaultStateDir: the SDK's clients look where the
// daemon listens.
func DefaultStateDir() string { return zygo.DefaultStateDir() }

// validateListen checks Listen, TLSCert and TLSKey and loads the key pair: a TCP address
// beyond loopback is served only with TLS.
// validateMetricsListen checks --metrics-listen: loopback only (it serves without a token).
func (c *Config) validateMetricsListen() error {
	addr, err := loopbackAddr("--metrics-listen", c.MetricsListen)
	c.MetricsListen = addr
	return err
}

func (c *Config) validateListen() error {
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return errors.New("--tls-cert and --tls-key go together: give both, or neither")
	}
	if c.TLSCert != "" {
		if c.Listen == "" && c.E2B == "" {
			return errors.New("--tls-cert: serving TLS needs --listen ADDR or --e2b ADDR")
		}
		cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
		if err != nil {
			return fmt.Errorf("--tls-cert %s, --tls-key %s: %w", c.TLSCert, c.TLSKey, err)
		}
		c.tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	var err error
	if c.E2B, err = tlsOrLoopback("--e2b", c.E2B, c.tlsConfig != nil); err != nil {
		return err
	}
	if c.Listen == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", c.Listen, err)
	}
	if strings.EqualFold(host, "localhost") {
		// Not looked up: /etc/hosts could map the name anywhere.
		host = "127.0.0.1"
		c.Listen = net.JoinHostPort(host, port)
	}
	if ip := net.ParseIP(host); c.tlsConfig == nil && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("--listen %q: an address beyond loopback is served only with TLS: give --tls-cert and --tls-key "+
			"(or listen on 127.0.0.1:PORT, [::1]:PORT or localhost:PORT)", c.Listen)
	}
	return nil
}

func (c *Config) validate() error {
	if c.StateDir == "" {
		return errors.New("state dir is empty")
	}
	abs, err := filepath.Abs(c.StateDir)
	if err != nil {
		return err
	}
	c.StateDir = abs
	if c.Bwrap == "" {
		p, err := exec.LookPath("bwrap")
		if err != nil {
			return errors.New("bwrap (bubblewrap) not found on PATH: install it with `apt-get install -y bubblewrap` or `make deps`")
		}
		c.Bwrap = p
	}
	if err := c.checkExecutables(); err != nil {
		return err
	}
	if err := c.validateListen(); err != nil {
		return err
	}
	if err := c.validateMetricsListen(); err != nil {
		return err
	}
	for _, t := range c.Sandbox.Templates {
		if _, err := sandbox.ParseTemplate(t); err != nil {
			return fmt.Errorf("--template: %w", err)
		}
	}
	if os.Geteuid() == 0 {
		if c.UIDRange == "" || c.UIDRange == "auto" {
			c.uidAuto = true
		} else {
			r, err := hostid.Parse(c.UIDRange)
			if err != nil {
				return err
			}
			c.uidRange = r
		}
		if c.HostFiles == (hostid.HostFiles{}) {
			c.HostFiles = hostid.SystemFiles
		}
		if c.UIDClaimDir == "" {
			c.UIDClaimDir = hostid.ClaimDir
		}
	}
	switch {
	case c.RunTmpfsMiB == 0:
		c.RunTmpfsMiB = 256
	case c.RunTmpfsMiB < 0:
		return fmt.Errorf("--run-tmpfs-mib %d: must be a positive number of MiB", c.RunTmpfsMiB)
	}
	switch {
	case c.KeepVersions == 0:
		c.KeepVersions = function.DefaultKeepVersions
	case c.KeepVersions < 1 || c.KeepVersions > MaxKeepVersions:
		return fmt.Errorf("--keep-versions %d: must be 1..%d (1 keeps only the active version: no rollback)", c.KeepVersions, MaxKeepVersions)
	}
	switch {
	case c.Sandbox.SecretImagesMiB == 0:
		c.Sandbox.SecretImagesMiB = 2048
	case c.Sandbox.SecretImagesMiB < 0:
		return fmt.Errorf("--secret-images-mib %d: must be a positive number of MiB", c.Sandbox.SecretImagesMiB)
	}
	if c.Sandbox.CheckpointImportMaxMiB < 0 {
		return fmt.Errorf("--checkpoint-import-max-mib %d: must be a positive number of MiB", c.Sandbox.CheckpointImportMaxMiB)
	}
	switch {
	case c.LogRetentionLines == 0:
		c.LogRetentionLines = store.DefaultLogRetentionLines
	case c.LogRetentionLines < 0 || c.LogRetentionLines > store.MaxLogRetentionLines:
		return fmt.Errorf("--log-retention-lines %d: must be 1..%d", c.LogRetentionLines, store.MaxLogRetentionLines)
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return nil
}

// loopbackAddr checks addr ("" is fine) of flag: a loopback host and a port, localhost
// meaning 127.0.0.1 (never looked up: /etc/hosts could map the name anywhere).
func loopbackAddr(flag, addr string) (string, error) {
	if addr == "" {
		return "", nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("%s %q: %w", flag, addr, err)
	}
	if strings.EqualFold(host, "localhost") {
		host = "127.0.0.1"
		addr = net.JoinHostPort(host, port)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return "", fmt.Errorf("%s %q: only loopback addresses are allowed (127.0.0.1:PORT, [::1]:PORT or localhost:PORT)", flag, addr)
	}
	return addr, nil
}

// Run starts the daemon and serves until ctx is cancelled, then shuts down:
// it stops accepting calls, stops every zygote and closes the store. ready,
// if not nil, is called once the API is listening.
func Run(ctx context.Context, cfg Config, ready func()) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	log := cfg.Log
	closeInheritedFDs()
	if old := keepReadableUmask(); old&^0o022 != 0 {
		log.Info("umask narrowed: the daemon keeps the read and search bits of the modes it names", "umask", fmt.Sprintf("%04o", old), "now", fmt.Sprintf("%04o", old&0o022))
	}
	if err := prepareStateDir(cfg.StateDir); err != nil {
		return err
	}
	unlock, err := lockStateDir(cfg.StateDir)
	if err != nil {
		return err
	}
	defer unlock()
	st, err := store.Open(ctx, filepath.Join(cfg.StateDir, "zygo.db"))
	if err != nil {
		return err
	}
	defer st.Close()
	st.SetLogRetention(cfg.LogRetentionLines)
	if os.Geteuid() == 0 {
		claim, err := claimUIDRange(ctx, &cfg, st)
		if err != nil {
			return err
		}
		defer func() {
			if err := claim.Release(); err != nil {
				log.Warn("releasing the uid range", "err", err)
			}
		}()
	}
	if err := checkTraversable(cfg.StateDir, cfg.uidRange.First); err != nil {
		return err
	}
	agentDir, err := agents.Extract(filepath.Join(cfg.StateDir, "agents"))
	if err != nil {
		return err
	}
	// Zygotes from an earlier run died with it (--die-with-parent); their run
	// directories, and the tmpfs of each left mounted by a daemon that was
	// killed, are stale. They hold what sandboxes wrote (their /tmp, request
	// dirs): unmounted, and what is left removed by descriptor, never
	// following a link.
	runRoot := filepath.Join(cfg.StateDir, "run")
	if err := agentproc.UnmountStale(runRoot); err != nil {
		return err
	}
	if err := removeRunDirs(ctx, cfg.StateDir); err != nil {
		return err
	}
	if err := os.MkdirAll(runRoot, 0o711); err != nil {
		return err
	}
	secrets, err := secret.Open(ctx, st.DB(), filepath.Join(cfg.StateDir, "secret.key"))
	if err != nil {
		return err
	}
	// After the state dir is locked: New sweeps what an earlier daemon of
	// the same tag left (veths, namespaces, its nftables table), except the
	// endpoints of the recorded sandboxes, whose addresses it reserves
	// before anything can Attach; recovery adopts them (or releases them).
	keep, err := sandboxAddresses(ctx, cfg, st)
	if err != nil {
		return err
	}
	netHost, err := openNetwork(ctx, cfg.Network, keep, log)
	if err != nil {
		return err
	}
	if netHost != nil {
		defer func() { // after mgr.Shutdown has closed the functions' endpoints
			if err := netHost.Close(context.Background()); err != nil {
				log.Warn("removing network endpoints", "err", err)
			}
		}()
	}
	reg := metrics.New()
	fcfg := functionConfig(cfg, st, agentDir)
	fcfg.Network, fcfg.Metrics = netHost, reg
	if fcfg.RandGuard, err = installRandGuard(cfg.RandGuard, agentDir, log); err != nil {
		return err
	}
	if lim := newLimiter(cfg, log); lim != nil {
		fcfg.Limiter = lim
		defer func() {
			if err := lim.Close(); err != nil {
				log.Warn("removing cgroups", "err", err)
			}
		}()
	}
	// After Shutdown: a version still draining when the daemon stops (its
	// zygote dies with the daemon) would leave its tmpfs mounted.
	defer func() {
		if err := agentproc.UnmountStale(runRoot); err != nil {
			log.Warn("unmounting run directories", "err", err)
		}
	}()
	mgr, err := function.NewManager(fcfg, st, secrets)
	if err != nil {
		return err
	}
	defer mgr.Shutdown()
	if err := mgr.Restore(ctx); err != nil {
		return err
	}
	watchFunctions(reg, mgr)
	sbx := openSandboxes(ctx, cfg, st, secrets, netHost, reg, log)
	defer sbx.close()
	pools, err := openPools(ctx, cfg, fcfg, st, secrets)
	if err != nil {
		return err
	}
	defer pools.Shutdown()
	tokens, err := openTokens(ctx, cfg, st)
	if err != nil {
		return err
	}
	apiSrv := api.NewServer(mgr, st, secrets, log, Version).WithSandboxes(sbx.api(), sbx.err).WithTokens(tokens).WithMetrics(reg.Handler()).WithPools(pools)
	accessKey, err := loadAccessKey(cfg, sbx)
	if err != nil {
		return err
	}
	if accessKey != nil {
		apiSrv.WithAccessKey(accessKey)
	}
	e2bHandler, closeE2B, err := e2bAPI(cfg, sbx, tokens, accessKey)
	if err != nil {
		return err
	}
	defer closeE2B()
	err = serveAPI(ctx, cfg, apiSrv, reg.Handler(), e2bHandler, ready)
	os.Remove(SocketPath(cfg.StateDir))
	log.Info("zygo daemon stopped")
	return err
}

// functionConfig returns the function manager's configuration: as root,
// each function gets a uid of cfg's range (recorded in st) and each zygote a
// run tmpfs; otherwise neither, which it logs.
func functionConfig(cfg Config, st *store.Store, agentDir string) function.Config {
	fcfg := function.Config{
		StateDir: cfg.StateDir, AgentDir: agentDir, Bwrap: cfg.Bwrap,
		ReadyTimeout: cfg.ReadyTimeout, RunTmpfsMiB: cfg.RunTmpfsMiB, Log: cfg.Log, KeepVersions: cfg.KeepVersions,
		NoHugePages: cfg.NoHugePages,
	}
	if os.Geteuid() == 0 {
		fcfg.HostIDs = hostid.NewAllocator(st, cfg.uidRange)
		cfg.Log.Info("function uids", "uid_range", hostid.String(cfg.uidRange))
	} else {
		fcfg.RunTmpfsMiB = 0 // mounting needs root
		cfg.Log.Warn("not root: functions run as the daemon's own uid, and their run directories (secrets included) are on the state dir's filesystem, not a tmpfs")
	}
	return fcfg
}

// openTokens returns the API tokens of st; with --listen, the token of
// TokenPath (loaded, or made on first use) is among them as "default".
func openTokens(ctx context.Context, cfg Config, st *store.Store) (*api.Tokens, error) {
	def := ""
	if cfg.Listen != "" || cfg.E2B != "" {
		var err error
		if def, err = api.LoadToken(TokenPath(cfg.StateDir)); err != nil {
			return nil, err
		}
	}
	return api.NewTokens(ctx, st, TokenPath(cfg.StateDir), def, cfg.Log)
}

// serveAPI serves srv on the daemon's listeners and metrics on the
// --metrics-listen one (see listen), calls ready, if not nil, once they accept calls, and returns when ctx ends (nil) or a
// listener fails (its error), after shutting every server down.
func serveAPI(ctx context.Context, cfg Config, srv *api.Server, metrics, e2bHandler http.Handler, ready func()) error {
	eps, err := listen(cfg, srv, metrics, e2bHandler)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	errc := make(chan error, len(eps))
	for _, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ep.srv.Serve(ep.l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	attrs := []any{"state_dir", cfg.StateDir, "socket", SocketPath(cfg.StateDir), "version", Version}
	for _, ep := range eps[1:] {
		switch {
		case ep.metricsOnly:
			attrs = append(attrs, "metrics_listen", ep.l.Addr().String())
		case ep.e2b:
			attrs = append(attrs, "e2b_listen", ep.l.Addr().String())
		default:
			attrs = append(attrs, "listen", ep.l.Addr().String(), "tls", cfg.tlsConfig != nil, "token_file", TokenPath(cfg.StateDir))
		}
	}
	cfg.Log.Info("zygo daemon serving", attrs...)
	if ready != nil {
		ready()
	}
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, ep := range eps {
		_ = ep.srv.Shutdown(sctx)
	}
	wg.Wait()
	return err
}

// prepareStateDir creates the state dir traversable (0711) by the
// unprivileged sandbox uid, which must reach versions/, agents/ and run/
// under it to bind them. It refuses a state dir that another user could
// change: one that dir, an ancestor or a top-level entry of it is owned by
// someone other than root or the daemon's euid, or is writable by a group
// or others (trusted.Dir, trusted.Entries), since that user could rename
// the socket, agents/ or versions/ and plant their own.
func prepareStateDir(dir string) error {
	euid := os.Geteuid()
	if err := trustedAncestors(dir, euid); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return fmt.Errorf("creating state dir: %w", err)
	}
	if err := trusted.Dir(dir, euid); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	if err := trusted.Entries(dir, euid); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	for _, sub := range []string{"versions", "agents", "etc"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return fmt.Errorf("creating state dir: %w", err)
		}
	}
	// versions/ is traversed, never listed, by the functions' uids: each
	// reaches its own versions/NAME only (function/codedir.go).
	if err := os.Chmod(filepath.Join(dir, "versions"), 0o711); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	return nil
}

// trustedAncestors checks (trusted.Dir) the nearest existing ancestor of
// dir before MkdirAll creates what is missing under it: nothing is created
// under a directory another user controls.
func trustedAncestors(dir string, euid int) error {
	p := dir
	for {
		if _, err := os.Lstat(p); err == nil || p == "/" {
			break
		}
		p = filepath.Dir(p)
	}
	if p == dir {
		return nil // exists: checked whole after MkdirAll
	}
	if err := trusted.Ancestor(p, euid); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	return nil
}

// lockStateDir takes an exclusive flock on STATE/zygo.lock so two daemons
// never share a state dir. The returned func releases it.
func lockStateDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, "zygo.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("locking state dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("another zygo daemon is already using %s", dir)
	}
	return func() { f.Close() }, nil
}

// endpoint is one listener and the server answering on it.
type endpoint struct {
	l           net.Listener
	srv         *http.Server
	metricsOnly bool // the --metrics-listen listener
	e2b         bool // the --e2b listener
}

// onlyLoopbackHost returns h behind a check of the request's Host: a loopback IP literal or
// localhost, else 421. The metrics listener has no token, so a web page the local user visits
// could otherwise read it through a DNS name rebound to 127.0.0.1 (its Host is that name).
func onlyLoopbackHost(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if hh, _, err := net.SplitHostPort(host); err == nil {
			host = hh
		}
		if ip := net.ParseIP(host); !strings.EqualFold(host, "localhost") && (ip == nil || !ip.IsLoopback()) {
			http.Error(w, "Host must be a loopback address or localhost", http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// listen opens the unix socket (mode 0600: its owner alone may call), served
// by srv.Handler, with cfg.Listen the TCP listener (TLS with cfg.tlsConfig),
// served by srv.TCPHandler: behind the API tokens, and with cfg.MetricsListen a
// loopback TCP listener answering GET /metrics with metrics (and 404 to
// anything else). On error nothing is left listening.
func listen(cfg Config, srv *api.Server, metrics, e2bHandler http.Handler) ([]endpoint, error) {
	h := srv.Handler()
	newServer := func(h http.Handler) *http.Server {
		// IdleTimeout: a kept-alive connection with no request for this long is closed.
		// ErrorLog: the server's own messages (a TLS handshake a client gave up) at debug level.
		return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
			ErrorLog: slog.NewLogLogger(cfg.Log.Handler(), slog.LevelDebug)}
	}
	sock := SocketPath(cfg.StateDir)
	os.Remove(sock) // stale socket from a daemon that died; we hold the lock
	ul, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", sock, err)
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		ul.Close()
		return nil, err
	}
	eps := []endpoint{{l: guardAgainstRunsc(ul, gvisor.ResolveRunsc(cfg.Sandbox.Runsc), cfg.Log), srv: newServer(h)}}
	if cfg.Listen != "" {
		tl, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			ul.Close()
			return nil, fmt.Errorf("listening on %s: %w", cfg.Listen, err)
		}
		if cfg.tlsConfig != nil {
			tl = tls.NewListener(tl, cfg.tlsConfig)
		}
		eps = append(eps, endpoint{l: tl, srv: newServer(srv.TCPHandler())})
	}
	if cfg.MetricsListen != "" {
		ml, err := net.Listen("tcp", cfg.MetricsListen)
		if err != nil {
			for _, ep := range eps {
				ep.l.Close()
			}
			return nil, fmt.Errorf("listening on %s (--metrics-listen): %w", cfg.MetricsListen, err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", metrics)
		eps = append(eps, endpoint{l: ml, srv: newServer(onlyLoopbackHost(mux)), metricsOnly: true})
	}
	if cfg.E2B != "" {
		el, err := net.Listen("tcp", cfg.E2B)
		if err != nil {
			for _, ep := range eps {
				ep.l.Close()
			}
			return nil, fmt.Errorf("listening on %s (--e2b): %w", cfg.E2B, err)
		}
		if cfg.tlsConfig != nil {
			el = tls.NewListener(el, cfg.tlsConfig)
		}
		eps = append(eps, endpoint{l: el, srv: newServer(e2bHandler), e2b: true})
	}
	return eps, nil
}

// newLimiter returns the cgroup manager of requests and sandboxes, or nil
// (with a warning) when cgroups cannot be managed here (not root): then
// memory_mib, pids, cpu_ms, zygote_memory_mib and zygote_pids are not
// enforced, and sandboxes share the daemon's cgroups.
func newLimiter(cfg Config, log *slog.Logger) *cgroup.Manager {
	// One parent per state dir, so that Cleanup never touches another
	// daemon's groups.
	sum := sha256.Sum256([]byte(cfg.StateDir))
	m, err := cgroup.New(cgroup.DefaultParent + "/" + hex.EncodeToString(sum[:6]))
	if err != nil {
		log.Warn("cgroups unavailable: memory_mib, pids, cpu_ms, zygote_memory_mib and zygote_pids are not enforced; sandboxes share the daemon's cgroups", "err", err)
		return nil
	}
	if err := m.Cleanup(); err != nil {
		log.Warn("cleaning up stale cgroups", "err", err)
	}
	return m
}

// Background runs a daemon with cfg in a goroutine and returns once its API
// is listening (or it failed to start, or 60 s passed). stop cancels it and
// waits for a clean shutdown, returning Run's error. Used by `zygo check`
// and the benchmarks, which run against a private daemon.
func Background(ctx context.Context, cfg Config) (stop func() error, err error) {
	dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ready := make(chan struct{})
	errc := make(chan error, 1)
	go func() { errc <- Run(dctx, cfg, func() { close(ready) }) }()
	select {
	case <-ready:
	case err := <-errc:
		cancel()
		return nil, fmt.Errorf("starting a private daemon: %w", err)
	case <-time.After(60 * time.Second):
		cancel()
		return nil, errors.New("the private daemon did not start within 60s")
	}
	return func() error {
		cancel()
		return <-errc
	}, nil
}

// closeInheritedFDs marks every descriptor above stderr close-on-exec, so
// that nothing the daemon inherited from whoever started it (a shell's
// stray fds, a CI runner's pipes) reaches bwrap and the sandboxes. The Go
// runtime opens its own descriptors close-on-exec already.
func closeInheritedFDs() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		var fd int
		if _, err := fmt.Sscan(e.Name(), &fd); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}

// checkTraversable fails when a parent of the state dir cannot be traversed
// by the sandbox uids (uid stands for them all: none owns a parent): bwrap,
// running as such a uid, could not bind the function's code and the agents,
// and every deploy would fail obscurely. uid 0 (a daemon that is not root)
// skips the check.
func checkTraversable(stateDir string, uid uint32) error {
	if uid == 0 {
		return nil
	}
	for dir := filepath.Dir(stateDir); ; dir = filepath.Dir(dir) {
		st, err := os.Stat(dir)
		if err != nil {
			return fmt.Errorf("state dir: %w", err)
		}
		sys, ok := st.Sys().(*syscall.Stat_t)
		if ok && st.Mode().Perm()&0o001 == 0 && sys.Uid != uid {
			return fmt.Errorf("state dir %s: its parent %s (mode %o) cannot be traversed by the sandbox uid %d: "+
				"choose a state dir under a path others can traverse, or `chmod o+x %s`", stateDir, dir, st.Mode().Perm(), uid, dir)
		}
		if dir == "/" {
			return nil
		}
	}
}

// removeRunDirs removes stateDir/run and all in it, walking by descriptor
// from stateDir (the daemon's own) so nothing a sandbox left there is
// followed.
func removeRunDirs(ctx context.Context, stateDir string) error {
	real, err := filepath.EvalSymlinks(stateDir) // configured by root: may be a link
	if err != nil {
		return fmt.Errorf("resolving state dir: %w", err)
	}
	d, err := untrusted.OpenDir(real)
	if err != nil {
		return fmt.Errorf("opening state dir: %w", err)
	}
	defer d.Close()
	if err := d.RemoveAll(ctx, "run"); err != nil {
		return fmt.Errorf("removing stale run dirs: %w", err)
	}
	return nil
}
