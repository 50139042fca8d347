package guest

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

// Config configures the in-sandbox Agent. Zero fields take the defaults in brackets.
type Config struct {
	SocketPath string // host listener to dial [SocketPath]
	BootPath   string // boot file, read and removed at Boot [BootPath]
	Python     string // interpreter for run-code [/usr/bin/python3]
	RunDir     string // where generation and identity are published [RunDir]
	// Root is the directory the agent treats as the sandbox's / for the files it owns:
	// /etc/hostname, /etc/machine-id, SSH host keys, boot-time seed files and SecretsDir ["/"
	// as PID 1]. An agent that is not PID 1 (the package's tests, on a host) must name
	// another directory: Boot refuses "/" then, so a test can never rewrite the host's files.
	Root string
	Log  *slog.Logger
}

func (c *Config) setDefaults() {
	if c.SocketPath == "" {
		c.SocketPath = SocketPath
	}
	if c.BootPath == "" {
		c.BootPath = BootPath
	}
	if c.Python == "" {
		c.Python = "/usr/bin/python3"
	}
	if c.RunDir == "" {
		c.RunDir = RunDir
	}
	if c.Root == "" {
		c.Root = "/"
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
}

// defaultEnv is the environment of exec, services and the interpreter before Boot.Env.
var defaultEnv = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/root", "LANG=C.UTF-8"}

// Agent is zygo-guest: PID 1 of a sandbox. It dials the host, serves its requests, reaps
// zombies and applies reseals. Boot once, then Run.
type Agent struct {
	cfg       Config
	log       *slog.Logger
	reaper    *reaper
	interp    *interp
	services  *services
	procs     *procTable
	startedAt time.Time

	bootServices      []Service // declared at boot, started after the first connection
	startServicesOnce sync.Once

	mu       sync.Mutex // guards token, identity, env
	token    string
	identity Identity
	env      []string
}

// New returns an Agent; it starts nothing.
func New(cfg Config) *Agent {
	cfg.setDefaults()
	a := &Agent{cfg: cfg, log: cfg.Log, reaper: newReaper(), startedAt: time.Now(), env: defaultEnv}
	a.interp = &interp{python: cfg.Python, env: a.baseEnv, reaper: a.reaper, log: cfg.Log, grace: InterruptGrace, busy: make(chan struct{}, 1)}
	a.procs = newProcTable(a.reaper)
	a.services = &services{log: cfg.Log, reaper: a.reaper, env: a.baseEnv, root: cfg.Root}
	return a
}

// path returns the sandbox path p (absolute) under Config.Root.
func (a *Agent) path(p string) string { return filepath.Join(a.cfg.Root, p) }

func (a *Agent) baseEnv() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.env...)
}

// Boot reads the boot file (and removes it where it can: in a sandbox the host directory is
// read-only and the host removes it), writes the hostname and machine id (as PID 1 only) and
// publishes the identity; Run starts the services after the first connection. It returns an
// error when the boot file is missing or malformed.
func (a *Agent) Boot(ctx context.Context) error {
	if os.Getpid() != 1 && filepath.Clean(a.cfg.Root) == "/" {
		return errors.New("zygo-guest is not PID 1: set Config.Root to a directory other than / (it would rewrite this host's /etc/machine-id, SSH host keys and /run/secrets)")
	}
	raw, err := os.ReadFile(a.cfg.BootPath)
	if err != nil {
		return fmt.Errorf("reading boot file: %w", err)
	}
	_ = os.Remove(a.cfg.BootPath)
	var b Boot
	if err := json.Unmarshal(raw, &b); err != nil {
		return fmt.Errorf("decoding boot file: %w", err)
	}
	if b.Token == "" {
		return errors.New("boot file has no token")
	}
	a.mu.Lock()
	a.token, a.identity = b.Token, b.Identity
	a.env = append(append([]string(nil), defaultEnv...), b.Env...)
	a.mu.Unlock()
	if b.MachineID == "" {
		id := make([]byte, 16)
		_, _ = rand.Read(id)
		b.MachineID = hex.EncodeToString(id)
	}
	if err := a.writeIdentityFiles(b.Identity.Hostname, b.MachineID); err != nil {
		return err
	}
	if err := a.publishIdentity(b.Identity); err != nil {
		return err
	}
	a.bootServices = b.Services
	return nil
}

// Run reaps children and keeps a connection to the host until ctx ends. It returns nil then.
func (a *Agent) Run(ctx context.Context) error {
	go a.reaper.run(ctx)
	mux := a.mux()
	backoff := 5 * time.Millisecond
	for ctx.Err() == nil {
		conn, err := a.dial(ctx)
		if err != nil {
			a.log.Debug("dialing host", "err", err)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
			}
			backoff = min(backoff*2, 500*time.Millisecond)
			continue
		}
		backoff = 5 * time.Millisecond
		// Services start once the host has accepted the first connection: by then it has
		// removed the boot file (Client.OnFirstConnect), so no code but PID 1 ever sees it.
		a.startServicesOnce.Do(func() { a.services.startAll(a.bootServices) })
		srv := newChannelServer()
		srv.ServeConn(conn, &http2.ServeConnOpts{Context: ctx, Handler: mux})
		conn.Close()
		a.log.Debug("host connection ended; dialing again")
	}
	return nil
}

// dial connects to the host and completes the handshake (noise.go): the Hello travels
// encrypted under the token's key, and the returned connection is the secured channel.
func (a *Agent) dial(ctx context.Context) (net.Conn, error) {
	conn, err := dialBlocking(a.cfg.SocketPath)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	token := a.token
	h := Hello{Proto: ProtocolVersion, SandboxID: a.identity.SandboxID, Generation: a.identity.Generation}
	a.mu.Unlock()
	// No deadline on the handshake: the connection is blocking; the host answers or closes it
	// within its own helloTimeout.
	b, _ := json.Marshal(h)
	sc, payload, err := initiateChannel(conn, token, b)
	if err != nil {
		conn.Close()
		return nil, err
	}
	var rep HelloReply
	if err := json.Unmarshal(payload, &rep); err != nil || !rep.OK {
		sc.Close()
		return nil, fmt.Errorf("host refused hello: %s", rep.Error)
	}
	return sc, nil
}

func (a *Agent) mux() http.Handler {
	m := http.NewServeMux()
	m.HandleFunc("GET /v1/info", a.handleInfo)
	m.HandleFunc("POST /v1/exec", a.handleExec)
	m.HandleFunc("POST /v1/run-code", a.handleRunCode)
	m.HandleFunc("GET /v1/files", a.handleGetFile)
	m.HandleFunc("PUT /v1/files", a.handlePutFile)
	m.HandleFunc("GET /v1/files/list", a.handleListFiles)
	m.HandleFunc("PUT /v1/secrets", a.handleSecrets)
	m.HandleFunc("POST /v1/reseal", a.handleReseal)
	m.HandleFunc("POST /v1/processes", a.handleStartProcess)
	m.HandleFunc("POST /v1/processes/connect", a.handleConnectProcess)
	m.HandleFunc("GET /v1/processes", a.handleListProcesses)
	m.HandleFunc("POST /v1/processes/input", a.handleProcessInput)
	m.HandleFunc("POST /v1/processes/close-stdin", a.handleProcessCloseStdin)
	m.HandleFunc("POST /v1/processes/signal", a.handleProcessSignal)
	m.HandleFunc("GET /v1/fs/stat", a.handleStat)
	m.HandleFunc("GET /v1/fs/list", a.handleListDir)
	m.HandleFunc("POST /v1/fs/mkdir", a.handleMakeDir)
	m.HandleFunc("POST /v1/fs/move", a.handleMove)
	m.HandleFunc("POST /v1/fs/remove", a.handleRemove)
	m.HandleFunc("GET /v1/fs/watch", a.handleWatch)
	m.HandleFunc("GET /v1/users", a.handleUser)
	return a.authenticate(m)
}

// authenticate rejects requests whose bearer token is not the current one.
func (a *Agent) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		a.mu.Lock()
		want := a.token
		a.mu.Unlock()
		if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
			writeError(w, http.StatusUnauthorized, "unauthorized", "bad token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (a *Agent) handleInfo(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	info := Info{SandboxID: a.identity.SandboxID, Generation: a.identity.Generation, PID: os.Getpid(), StartedAt: a.startedAt, Now: time.Now()}
	a.mu.Unlock()
	info.Services = a.services.status()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(info)
}
