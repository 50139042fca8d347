package forkcheck

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/network"
	"github.com/zygo-run/zygo/internal/sandbox"
	"github.com/zygo-run/zygo/internal/sandbox/engine"
)

// EngineConfig configures a private sandbox engine. Zero fields take the defaults in brackets.
type EngineConfig struct {
	// GuestBinary is the static zygo-guest, with its hidden `probe` subcommand [zygo-guest
	// next to the running executable, else on PATH].
	GuestBinary string
	// Backend names the engine to check, one of engine.Names() [engine.Default].
	Backend string
	// Runsc is the runsc binary [the gvisor backend's default: /usr/local/bin/runsc, PATH].
	Runsc string
	// Log receives the Manager's and backend's logs [discarded].
	Log *slog.Logger
}

// SandboxEngine is a sandbox Manager of the check's own: the configured backend (gVisor by
// default, built by engine.New as the daemon's is) and an in-memory
// registry on a fresh temporary state dir, so the check needs no daemon and touches no
// user's sandboxes (as the functions mode runs a private daemon). Close removes all of it.
type SandboxEngine struct {
	Manager *sandbox.Manager
	be      engine.Engine
	dir     string
	net     *network.Host // the copies' network: each its own namespace, address and MAC
}

// NewSandboxEngine makes a private engine. It returns an error naming
// scripts/install-runsc.sh when runsc is missing, and one naming `make build` when zygo-guest
// is missing; on error nothing is left behind.
func NewSandboxEngine(cfg EngineConfig) (*SandboxEngine, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("gVisor sandboxes need root: run zygo check sandboxes as root")
	}
	guestBin, err := guest.FindBinary(cfg.GuestBinary, "--guest-binary")
	if err != nil {
		return nil, err
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	// Short: the guest's socket path under it must fit a unix socket (108 bytes).
	dir, err := os.MkdirTemp("/tmp", "zgc-")
	if err != nil {
		return nil, err
	}
	be, err := engine.New(engine.Config{Backend: cfg.Backend, Runsc: cfg.Runsc, StateDir: filepath.Join(dir, "e"),
		GuestBinary: guestBin, Log: log})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err // a missing runsc names scripts/install-runsc.sh
	}
	// Names and addresses of the check's own, so it never sweeps a daemon's endpoints.
	nh, err := network.New(context.Background(), network.Config{Tag: checkNetTag(), Pool: checkNetPool(), Log: log})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("setting up the copies' network: %w", err)
	}
	m, err := sandbox.NewManager(sandbox.ManagerConfig{Backend: be, Registry: sandbox.NewMemRegistry(),
		ImageDir: filepath.Join(dir, "images"), Log: log, Network: sandbox.HostNetwork{Host: nh}})
	if err != nil {
		_ = nh.Close(context.Background())
		os.RemoveAll(dir)
		return nil, err
	}
	return &SandboxEngine{Manager: m, be: be, dir: dir, net: nh}, nil
}

// Close removes every sandbox and checkpoint the engine made, releases what runsc keeps on
// the host and deletes the state dir. It uses its own bounded context, so it also cleans up
// after an interrupted check.
func (e *SandboxEngine) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errs []error
	recs, _ := e.Manager.List(ctx)
	for _, r := range recs {
		if err := e.Manager.Remove(ctx, r.ID); err != nil {
			errs = append(errs, err)
		}
	}
	ids, _ := e.be.List(ctx)
	for _, id := range ids {
		if err := e.be.Destroy(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	_ = e.Manager.Close()
	if err := e.be.ReleaseHost(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := e.net.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		errs = append(errs, os.RemoveAll(e.dir))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cleaning up the check's sandboxes in %s: %w", e.dir, err)
	}
	return nil
}

// checkNetTag is a random network.Config.Tag (4 lowercase letters) for one check.
func checkNetTag() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = 'a' + b[i]%26
	}
	return string(b)
}

// checkNetPool is a random /24 of 10.223.0.0/16 for one check's copies.
func checkNetPool() netip.Prefix {
	var b [1]byte
	_, _ = rand.Read(b[:])
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 223, b[0], 0}), 24)
}
