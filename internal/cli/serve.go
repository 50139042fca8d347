package cli

import (
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"time"

	"github.com/spf13/cobra"

	"github.com/zygo-run/zygo/internal/daemon"
	"github.com/zygo-run/zygo/internal/function"
	"github.com/zygo-run/zygo/internal/hostid"
	"github.com/zygo-run/zygo/internal/network"
)

func newServeCmd(g *globals) *cobra.Command {
	var listen, bwrap, uidRange, randGuard, cpuProfile string
	var tmpfsMiB, keepVersions int
	var readyTimeout time.Duration
	var debug bool
	var sbx daemon.SandboxConfig
	var nc daemon.NetworkConfig
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the Zygo daemon in the foreground",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			level := slog.LevelInfo
			if debug {
				level = slog.LevelDebug
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
			if cpuProfile != "" {
				stop, err := startCPUProfile(cpuProfile)
				if err != nil {
					return err
				}
				defer stop()
			}
			return daemon.Run(cmd.Context(), daemon.Config{
				StateDir: g.resolveStateDir(), Listen: listen, Bwrap: bwrap,
				UIDRange: uidRange, RunTmpfsMiB: tmpfsMiB, ReadyTimeout: readyTimeout, KeepVersions: keepVersions, Sandbox: sbx, Network: nc, Log: log,
				RandGuard: randGuard,
			}, nil)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "", "also serve the API on this loopback TCP address (127.0.0.1:PORT or localhost:PORT; PORT 0 picks one, logged); calls on it need the token in STATE/api.token")
	cmd.Flags().StringVar(&bwrap, "bwrap", "", "path of bwrap (default: found on PATH)")
	cmd.Flags().StringVar(&uidRange, "uid-range", "auto", "host uids the daemon owns, START-END or START:COUNT, claimed on the host while it runs; each function runs as one of its own (root only). "+
		"auto: the first free block of 65536 from "+fmt.Sprint(hostid.Default.First)+" (the last run's first). Refused if another daemon claims it, "+
		"if /etc/passwd, /etc/group, /etc/subuid or /etc/subgid use any, or if a host process runs as one")
	cmd.Flags().IntVar(&tmpfsMiB, "run-tmpfs-mib", 256, "size cap of each of a zygote's two tmpfs, one for its request files and secrets, one for its /tmp and /dev/shm (MiB)")
	cmd.Flags().DurationVar(&readyTimeout, "ready-timeout", 60*time.Second, "how long a zygote may take to import and warm up")
	cmd.Flags().IntVar(&keepVersions, "keep-versions", function.DefaultKeepVersions, fmt.Sprintf("versions of each function kept for zygo rollback, the active one included (1..%d); older ones are deleted once no zygote runs them", daemon.MaxKeepVersions))
	cmd.Flags().BoolVar(&debug, "debug", false, "log at debug level")
	cmd.Flags().StringVar(&cpuProfile, "cpuprofile", "", "write a Go CPU profile of the daemon to this file until it stops (read it with go tool pprof)")
	cmd.Flags().StringVar(&randGuard, "rand-guard", "", "native-randomness guard preloaded into fork-mode Python zygotes (default: "+daemon.RandGuardName+" next to zygo; built by make build)")
	cmd.Flags().StringVar(&sbx.GuestBinary, "guest-binary", "", "static zygo-guest for gVisor sandboxes (default: next to zygo, then PATH)")
	cmd.Flags().StringVar(&sbx.Runsc, "runsc", "", "runsc binary (default /usr/local/bin/runsc, then PATH)")
	cmd.Flags().IntVar(&sbx.SecretImagesMiB, "secret-images-mib", 2048, "size cap of the tmpfs holding the checkpoint images of sandboxes with secrets (MiB)")
	cmd.Flags().BoolVar(&sbx.Disabled, "no-sandboxes", false, "serve functions only; sandbox calls answer 503")
	cmd.Flags().BoolVar(&sbx.Network.Disabled, "no-sandbox-network", false, "run every sandbox without network (loopback only)")
	cmd.Flags().BoolVar(&nc.Disabled, "no-network", false, "run without networking: functions with [network] egress = \"allow\" are refused")
	cmd.Flags().StringVar(&nc.Pool, "network-pool", "", "IPv4 CIDR the functions' and sandboxes' addresses come from, a /30 each (default "+network.DefaultPool.String()+")")
	cmd.Flags().StringSliceVar(&nc.DNS, "network-dns", nil, "upstream DNS resolvers (IPv4) of the per-endpoint DNS forwarder (default: the host's /etc/resolv.conf nameservers)")
	cmd.Flags().StringSliceVar(&nc.Forbidden, "network-forbid", nil, "extra IPv4 CIDRs no function or sandbox may reach, on top of the host, each other and link-local/metadata ranges")
	cmd.Flags().StringVar(&nc.Tag, "network-tag", "", "0-4 lowercase letters added to the names of the nftables table, veths and namespaces, for several daemons on one machine")
	return cmd
}

// startCPUProfile starts the Go CPU profiler writing to path (created or
// truncated); stop ends the profile and closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("creating the CPU profile: %w", err)
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
