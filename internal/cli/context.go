package cli

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/spf13/cobra"

	"github.com/zygo-run/zygo/sdk/go/wire"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// Where the client commands find the daemon. Each setting comes from the first of: a flag,
// an environment variable, the context file, a default:
//
//	address      --addr        $ZYGO_ADDR     address       the unix socket of --state-dir
//	token        -             $ZYGO_TOKEN    token         api.token in --state-dir, if readable
//	CA file      --ca          $ZYGO_CA       ca            the system's roots
//	server name  --server-name $ZYGO_SERVER_NAME server_name the address's host
//
// The context file is $XDG_CONFIG_HOME/zygo/config.toml, else ~/.config/zygo/config.toml;
// a missing file is no error, a key it does not know is. An address is host:port (plain
// HTTP, for a loopback daemon; TLS when a CA or server name is set) or https://host:port
// (TLS); http://host:port is plain HTTP. The token is never taken from a flag (it would show
// in ps and shell history). The context file's token and server_name belong to its address:
// with an address from --addr or $ZYGO_ADDR (another one) they are not used; --server-name or
// $ZYGO_SERVER_NAME gives the name the certificate holds when the address is an IP (a
// Kubernetes node agent: the ZygoNode's address is POD-IP:7443, its certificate names
// zygo-node; an access Secret's serverName).

// contextFile is the context file's contents.
type contextFile struct {
	Address    string `toml:"address"`
	Token      string `toml:"token"`
	CA         string `toml:"ca"`
	ServerName string `toml:"server_name"`
}

// contextKeys are the keys of contextFile, for the message of an unknown one.
const contextKeys = "address, token, ca, server_name"

// globals are the root command's flags and what resolve made of them.
type globals struct {
	stateDir   string
	addr       string
	ca         string
	serverName string

	// Set by resolve.
	tgt target
}

// target is the daemon the client commands talk to.
type target struct {
	stateDir   string
	addr       string // host:port; "" for the unix socket
	tls        bool
	ca         string // CA file; "" for the system's roots
	serverName string
	token      string
	// tokenFrom is where the token came from: "$ZYGO_TOKEN", the context file's path, the
	// token file's path, or "" when none was found.
	tokenFrom string
	// addrFrom is where the address came from: "--addr", "$ZYGO_ADDR" or the context file's path.
	addrFrom string
	c        *zygo.Client
}

func (g *globals) addFlags(root *cobra.Command) {
	root.PersistentFlags().StringVar(&g.stateDir, "state-dir", "", "daemon state directory (default $ZYGO_STATE_DIR, else "+zygo.DefaultStateDir()+")")
	root.PersistentFlags().StringVar(&g.addr, "addr", "", "talk to the daemon over TCP: host:port (loopback, plain HTTP) or https://host:port (TLS); "+
		"default $ZYGO_ADDR, else address in "+contextPath()+", else the unix socket; the token comes from $ZYGO_TOKEN, "+
		"else the context file, else api.token in the state dir")
	root.PersistentFlags().StringVar(&g.ca, "ca", "", "PEM file of the CA (or self-signed certificate) to trust for a TLS daemon "+
		"(default $ZYGO_CA, else ca in the context file, else the system's roots)")
	root.PersistentFlags().StringVar(&g.serverName, "server-name", "", "the name the TLS daemon's certificate holds, when the address "+
		"is not it (an IP): checked instead of the address's host (default $ZYGO_SERVER_NAME, else server_name in the context file "+
		"for its own address)")
}

// contextPath returns the context file's path (see the top of this file); "" when neither
// $XDG_CONFIG_HOME nor the home directory is known.
func contextPath() string {
	if x := os.Getenv("XDG_CONFIG_HOME"); x != "" {
		return filepath.Join(x, "zygo", "config.toml")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".config", "zygo", "config.toml")
}

// loadContext reads the context file at path: the zero value when it does not exist.
// Errors name the file, and the key for an unknown one; a file holding a token that other
// users may read is refused (Unix), as ssh refuses such a key.
func loadContext(path string) (contextFile, error) {
	var cf contextFile
	if path == "" {
		return cf, nil
	}
	md, err := toml.DecodeFile(path, &cf)
	if errors.Is(err, fs.ErrNotExist) {
		return contextFile{}, nil
	}
	if err != nil {
		return cf, fmt.Errorf("reading the context file %s: %w", path, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		return cf, fmt.Errorf("the context file %s: unknown key %q (known: %s)", path, und[0].String(), contextKeys)
	}
	if cf.Token != "" && runtime.GOOS != "windows" {
		if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
			return cf, fmt.Errorf("the context file %s holds a token and has mode %o: chmod 600 it", path, st.Mode().Perm())
		}
	}
	if cf.CA != "" && !filepath.IsAbs(cf.CA) { // relative to the file, not to where zygo runs
		cf.CA = filepath.Join(filepath.Dir(path), cf.CA)
	}
	return cf, nil
}

// resolve works out g.tgt from the flags, the environment and the context file.
func (g *globals) resolve() error {
	path := contextPath()
	cf, err := loadContext(path)
	if err != nil {
		return err
	}
	t := target{stateDir: g.stateDir}
	if t.stateDir == "" {
		t.stateDir = os.Getenv("ZYGO_STATE_DIR")
	}
	if t.stateDir == "" {
		t.stateDir = zygo.DefaultStateDir()
	}
	t.addr, t.addrFrom = first(g.addr, "--addr", os.Getenv("ZYGO_ADDR"), "$ZYGO_ADDR", cf.Address, path)
	t.ca, _ = first(g.ca, "--ca", os.Getenv("ZYGO_CA"), "$ZYGO_CA", cf.CA, path)
	// The context file's token and server name belong to its address: an address given by
	// flag or environment never receives them (a token is sent only where it was meant to go).
	ctxToken := ""
	if cf.Address != "" && (t.addrFrom == path || t.addr == cf.Address) {
		ctxToken, t.serverName = cf.Token, cf.ServerName
	}
	if sn, _ := first(g.serverName, "--server-name", os.Getenv("ZYGO_SERVER_NAME"), "$ZYGO_SERVER_NAME"); sn != "" {
		t.serverName = sn
	}
	if t.addr == "" {
		g.tgt = t
		g.tgt.c = zygo.NewClient(filepath.Join(t.stateDir, zygo.SocketName))
		return nil
	}
	if err := t.parseAddr(); err != nil {
		return err
	}
	loopback := isLoopbackHost(t.addr)
	if !t.tls && !loopback {
		// The daemon serves plain HTTP on loopback only: anything else would carry the
		// token in the clear across a network.
		return usagef("%s %q: plain HTTP only reaches a daemon on this host (loopback); a daemon elsewhere serves TLS: use https://%s", t.addrFrom, t.addr, t.addr)
	}
	t.token, t.tokenFrom = first(strings.TrimSpace(os.Getenv("ZYGO_TOKEN")), "$ZYGO_TOKEN", ctxToken, path)
	if t.token == "" && loopback { // STATE/api.token is this host's daemon's, for its loopback listener
		tf := filepath.Join(t.stateDir, zygo.TokenName)
		if b, err := os.ReadFile(tf); err == nil {
			if tok := strings.TrimSpace(string(b)); tok != "" {
				t.token, t.tokenFrom = tok, tf
			}
		}
	}
	if !t.tls {
		t.c = zygo.NewTCPClient(t.addr, t.token)
		g.tgt = t
		return nil
	}
	tc := &tls.Config{ServerName: t.serverName}
	if t.ca != "" {
		pool, err := zygo.LoadCA(t.ca)
		if err != nil {
			return fmt.Errorf("--ca: %w", err)
		}
		tc.RootCAs = pool
	}
	t.c = zygo.NewTLSClient(t.addr, t.token, tc)
	g.tgt = t
	return nil
}

// isLoopbackHost reports whether host:port names this host's loopback: localhost, or a
// loopback IP literal (a name is not looked up).
func isLoopbackHost(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// parseAddr splits a scheme off t.addr and decides t.tls (see the top of this file).
func (t *target) parseAddr() error {
	rest, https := strings.CutPrefix(t.addr, "https://")
	rest, http := strings.CutPrefix(rest, "http://")
	if strings.Contains(rest, "://") {
		return usagef("%s %q: want host:port, https://host:port or http://host:port", t.addrFrom, t.addr)
	}
	rest = strings.TrimSuffix(rest, "/")
	if _, _, err := net.SplitHostPort(rest); err != nil {
		return usagef("%s %q: want host:port (%v)", t.addrFrom, t.addr, err)
	}
	t.addr = rest
	t.tls = https || (!http && (t.ca != "" || t.serverName != ""))
	return nil
}

// first returns the first non-empty value of pairs (value, where it came from) and where
// it came from; "", "" when all are empty.
func first(pairs ...string) (value, from string) {
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i] != "" {
			return pairs[i], pairs[i+1]
		}
	}
	return "", ""
}

// client returns the client resolve made. Commands call it from RunE, after resolve.
func (g *globals) client() *zygo.Client {
	if g.tgt.c == nil { // a command marked local that talks to its own daemon: its socket
		return zygo.NewClient(filepath.Join(g.resolveStateDir(), zygo.SocketName))
	}
	return g.tgt.c
}

// resolveStateDir returns the state dir the client commands use.
func (g *globals) resolveStateDir() string {
	if g.stateDir != "" {
		return g.stateDir
	}
	if s := os.Getenv("ZYGO_STATE_DIR"); s != "" {
		return s
	}
	return zygo.DefaultStateDir()
}

// explain adds to err what the user can do about it: a 401 says where the token came from,
// a certificate that did not verify says how to trust it.
func (g *globals) explain(err error) error {
	t := &g.tgt
	if zygo.IsUnauthenticated(err) {
		return t.explainUnauthenticated(err)
	}
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	switch {
	case errors.As(err, &ua):
		return fmt.Errorf("%w\nthe daemon's certificate is not signed by a CA zygo trusts: give its CA (or the certificate "+
			"itself, if self-signed) with --ca, $ZYGO_CA or ca in %s", err, contextPath())
	case errors.As(err, &hn):
		return fmt.Errorf("%w\nthe daemon's certificate is not for %s: connect by a name it holds, or give one with --server-name "+
			"NAME (or $ZYGO_SERVER_NAME; server_name in %s applies only to the address in that file)",
			err, t.addr, contextPath())
	}
	var ue *zygo.Unreachable
	if errors.As(err, &ue) && t.addr != "" && !t.tls && isTLSRecordError(err) {
		return fmt.Errorf("%w\nthe daemon at %s speaks TLS: use https://%s", err, t.addr, t.addr)
	}
	return err
}

// isTLSRecordError reports whether err is what plain HTTP gets from a TLS server.
func isTLSRecordError(err error) bool {
	return strings.Contains(err.Error(), "malformed HTTP response") || strings.Contains(err.Error(), "\\x15\\x03")
}

// explainUnauthenticated adds to a 401 what the user can do.
func (t *target) explainUnauthenticated(err error) error {
	if strings.HasPrefix(t.token, wire.SandboxAccessTokenPrefix) { // a sandbox's token: zygo token ls does not list it
		if _, ok := wire.SandboxOfAccessToken(t.token); !ok {
			return fmt.Errorf("%w\nthe sandbox access token in %s is malformed: one is %sID_ and 64 hex digits, "+
				"as `zygo sandbox token ID` prints it", err, t.tokenFrom, wire.SandboxAccessTokenPrefix)
		}
		return fmt.Errorf("%w\nthe daemon at %s refused the sandbox access token in %s: its sandbox is gone (removed), "+
			"or it is another daemon's; a token dies with its sandbox: mint one for a live sandbox with `zygo sandbox token ID`",
			err, t.addr, t.tokenFrom)
	}
	switch t.tokenFrom {
	case "":
		return fmt.Errorf("%w\nzygo found no token to send (no $ZYGO_TOKEN, no token in %s, no readable %s): set ZYGO_TOKEN to a token "+
			"of `zygo token create` or to the contents of api.token in the daemon's state dir, or run zygo as the daemon's user "+
			"with the same --state-dir", err, contextPath(), filepath.Join(t.stateDir, zygo.TokenName))
	case "$ZYGO_TOKEN":
		return fmt.Errorf("%w\nthe daemon at %s refused the token in $ZYGO_TOKEN: it was revoked, or is another daemon's "+
			"(`zygo token ls` on the daemon's host lists the valid ones)", err, t.addr)
	case filepath.Join(t.stateDir, zygo.TokenName):
		return fmt.Errorf("%w\nthe daemon at %s refused the token in %s: it serves another state dir; pass its --state-dir, "+
			"or set ZYGO_TOKEN to one of its tokens", err, t.addr, t.tokenFrom)
	default:
		return fmt.Errorf("%w\nthe daemon at %s refused the token in %s: it was revoked, or is another daemon's", err, t.addr, t.tokenFrom)
	}
}
