//go:build linux

package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/zygo-run/zygo/internal/daemon"
	"github.com/zygo-run/zygo/internal/function"
	"github.com/zygo-run/zygo/internal/hostid"
	"github.com/zygo-run/zygo/internal/network"
	"github.com/zygo-run/zygo/internal/store"
)

func newServeCmd(g *globals) *cobra.Command {
	var listen, tlsCert, tlsKey, bwrap, uidRange, randGuard, cpuProfile, configPath string
	var noHugePages bool
	var tmpfsMiB, logRetention, keepVersions int
	var readyTimeout time.Duration
	var debug bool
	var logFormat, logLevel, metricsListen, e2bListen string
	var templates []string
	var sbx daemon.SandboxConfig
	var nc daemon.NetworkConfig
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the Zygo daemon in the foreground",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyServeConfig(cmd.Flags(), configPath); err != nil {
				return err
			}
			if debug {
				logLevel = "debug"
			}
			log, err := newDaemonLogger(cmd.ErrOrStderr(), logFormat, logLevel)
			if err != nil {
				return err
			}
			if sysmonErr != nil { // Execute's re-execution (sysmon_linux.go)
				log.Warn("the Go scheduler's monitor keeps its default ticks", "err", sysmonErr)
			}
			if keepVersions < 1 { // 0 would mean the default to daemon.Config
				return fmt.Errorf("--keep-versions %d: must be 1..%d (1 keeps only the active version: no rollback)", keepVersions, daemon.MaxKeepVersions)
			}
			if logRetention < 1 { // 0 would mean the default to daemon.Config
				return fmt.Errorf("--log-retention-lines %d: must be 1..%d", logRetention, store.MaxLogRetentionLines)
			}
			for _, f := range []struct {
				name string
				v    int
			}{{"run-tmpfs-mib", tmpfsMiB}, {"secret-images-mib", sbx.SecretImagesMiB}, {"checkpoint-import-max-mib", sbx.CheckpointImportMaxMiB}} {
				if f.v < 1 { // 0 would mean the default to daemon.Config; the daemon refuses below 0 alike
					return fmt.Errorf("--%s %d: must be a positive number of MiB", f.name, f.v)
				}
			}
			if cpuProfile != "" {
				stop, err := startCPUProfile(cpuProfile)
				if err != nil {
					return err
				}
				defer stop()
			}
			sbx.Templates = templates
			return daemon.Run(cmd.Context(), daemon.Config{
				StateDir: g.resolveStateDir(), Listen: listen, TLSCert: tlsCert, TLSKey: tlsKey, Bwrap: bwrap,
				UIDRange: uidRange, RunTmpfsMiB: tmpfsMiB, ReadyTimeout: readyTimeout, KeepVersions: keepVersions, Sandbox: sbx, Network: nc, Log: log,
				RandGuard: randGuard, NoHugePages: noHugePages, LogRetentionLines: logRetention, MetricsListen: metricsListen, E2B: e2bListen,
			}, nil)
		},
	}
	cmd.Flags().StringVar(&configPath, configFlag, "", "the daemon's configuration file: TOML whose keys are these flags' long names (run-tmpfs-mib = 512); "+
		"flags given here override it; unknown keys and bad values stop the daemon (default "+DefaultConfigFile+" when it exists)")
	cmd.Flags().StringVar(&listen, "listen", "", "also serve the API on this TCP address: loopback (127.0.0.1:PORT, [::1]:PORT, localhost:PORT) in plain HTTP, "+
		"or with --tls-cert and --tls-key any (HOST:PORT, :PORT); PORT 0 picks one, logged. Calls on it need a token: STATE/api.token's, or one of zygo token create")
	cmd.Flags().StringVar(&tlsCert, "tls-cert", "", "PEM certificate (chain) the --listen address serves TLS with; needs --tls-key")
	cmd.Flags().StringVar(&tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	cmd.Flags().StringVar(&metricsListen, "metrics-listen", "", "also serve GET /metrics (Prometheus) alone on this loopback TCP address, without a token (any local user can read it: function names and counts)")
	cmd.Flags().StringVar(&e2bListen, "e2b", "", "also serve E2B's API (control and envd, for E2B's SDKs: E2B_API_URL and E2B_SANDBOX_URL) on this TCP address: "+
		"loopback in plain HTTP, any other only with --tls-cert and --tls-key; its API keys are the API tokens (docs/sandboxes.md, \"E2B\")")
	cmd.Flags().StringArrayVar(&templates, "template", nil, "a sandbox template NAME=DIR: a root directory sandboxes are created from by name (repeatable; base is built in)")
	cmd.Flags().StringVar(&bwrap, "bwrap", "", "path of bwrap (default: found on PATH)")
	cmd.Flags().StringVar(&uidRange, "uid-range", "auto", "host uids the daemon owns, START-END or START:COUNT, claimed on the host while it runs; each function runs as one of its own (root only). "+
		"auto: the first free block of 65536 from "+fmt.Sprint(hostid.Default.First)+" (the last run's first). Refused if another daemon claims it, "+
		"if /etc/passwd, /etc/group, /etc/subuid or /etc/subgid use any, or if a host process runs as one")
	cmd.Flags().IntVar(&tmpfsMiB, "run-tmpfs-mib", 256, "size cap of each of a zygote's two tmpfs, one for its request files and secrets, one for its /tmp and /dev/shm (MiB)")
	cmd.Flags().DurationVar(&readyTimeout, "ready-timeout", 60*time.Second, "how long a zygote may take to import and warm up")
	cmd.Flags().IntVar(&keepVersions, "keep-versions", function.DefaultKeepVersions, fmt.Sprintf("versions of each function kept for zygo rollback, the active one included (1..%d); older ones are deleted once no zygote runs them", daemon.MaxKeepVersions))
	cmd.Flags().BoolVar(&debug, "debug", false, "log at debug level (--log-level debug)")
	cmd.Flags().StringVar(&logFormat, "log-format", "text", "format of the daemon's log on stderr: text (key=value) or json (one object a line)")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "the least severe records logged: debug (every API call, with its request id and duration), info, warn or error")
	cmd.Flags().IntVar(&logRetention, "log-retention-lines", store.DefaultLogRetentionLines, fmt.Sprintf("log lines each function keeps (its newest; 1..%d, each at most 16 KiB)", store.MaxLogRetentionLines))
	cmd.Flags().StringVar(&cpuProfile, "cpuprofile", "", "write a Go CPU profile of the daemon to this file until it stops (read it with go tool pprof)")
	cmd.Flags().StringVar(&randGuard, "rand-guard", "", "native-randomness guard preloaded into fork-mode Python zygotes (default: "+daemon.RandGuardName+" next to zygo; built by make build)")
	cmd.Flags().StringVar(&sbx.GuestBinary, "guest-binary", "", "static zygo-guest for gVisor sandboxes (default: next to zygo, then PATH)")
	cmd.Flags().StringVar(&sbx.Runsc, "runsc", "", "runsc binary (default /usr/local/bin/runsc, then PATH)")
	cmd.Flags().IntVar(&sbx.SecretImagesMiB, "secret-images-mib", 2048, "size cap of the tmpfs holding the checkpoint images of sandboxes with secrets (MiB)")
	cmd.Flags().IntVar(&sbx.CheckpointImportMaxMiB, "checkpoint-import-max-mib", 8192, "largest checkpoint image an import (zygo sandbox checkpoints import) accepts (MiB of its tar)")
	cmd.Flags().BoolVar(&noHugePages, "no-huge-pages", false, "keep fork-mode Python zygotes' code and heap on small pages (for perf or py-spy, or to save the memory: about 4 MiB a zygote, more with a large heap; requests then take more CPU)")
	cmd.Flags().BoolVar(&sbx.Disabled, "no-sandboxes", false, "serve functions only; sandbox calls answer 503")
	cmd.Flags().BoolVar(&sbx.Network.Disabled, "no-sandbox-network", false, "run every sandbox without network (loopback only)")
	cmd.Flags().BoolVar(&nc.Disabled, "no-network", false, "run without networking: functions with [network] egress = \"allow\" are refused")
	cmd.Flags().StringVar(&nc.Pool, "network-pool", "", "IPv4 CIDR the functions' and sandboxes' addresses come from, a /30 each (default "+network.DefaultPool.String()+")")
	cmd.Flags().StringSliceVar(&nc.DNS, "network-dns", nil, "upstream DNS resolvers (IPv4) of the per-endpoint DNS forwarder (default: the host's /etc/resolv.conf nameservers)")
	cmd.Flags().StringSliceVar(&nc.Forbidden, "network-forbid", nil, "extra IPv4 CIDRs no function or sandbox may reach, on top of the host, each other and link-local/metadata ranges")
	cmd.Flags().StringVar(&nc.Tag, "network-tag", "", "0-4 lowercase letters added to the names of the nftables table, veths and namespaces, for several daemons on one machine")
	return cmd
}

// newDaemonLogger returns the daemon's logger writing to w in format (text or json) from
// level on (debug, info, warn or error); an error names the flag that is wrong.
func newDaemonLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	switch strings.ToLower(level) {
	case "debug":
		lv = slog.LevelDebug
	case "info":
		lv = slog.LevelInfo
	case "warn", "warning":
		lv = slog.LevelWarn
	case "error":
		lv = slog.LevelError
	default:
		return nil, fmt.Errorf("--log-level %q: must be debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: must be text or json", format)
}

// startCPUProfile starts the Go CPU profiler writing to path, a new file
// (0600; never an existing file or a symbolic link, so the flag cannot make
// root truncate one); stop ends the profile and closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("--cpuprofile %s: the file exists; name a new file (the profile never overwrites one)", path)
		}
		return nil, fmt.Errorf("--cpuprofile %s: creating the CPU profile: %w", path, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting the CPU profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
