// Package gvisor is the sandbox.Backend on gVisor's runsc: platform systrap, runsc's own network
// stack in a namespace the host made for the instance (Spec.Net) or loopback only, a root of read-only host files (or a given directory) under an in-memory overlay, zygo-guest as
// PID 1, and checkpoint/restore with runsc checkpoint --leave-running and runsc restore.
//
// # State directory
//
//	StateDir/runsc/              runsc --root: runsc's own container state
//	StateDir/rootfs/             the default root's template: mount points and a few /etc
//	                             files, shared read-only by every instance
//	StateDir/bin/zygo-guest      the agent binary, bound read-only at /zygo/guest
//	StateDir/instances/ID/       one per instance, removed by Destroy:
//	    config.json              the OCI bundle (its own hostname and host dir)
//	    host/                    bound read-only at /zygo/host; holds agent.sock, and boot.json
//	                             until the guest's first connection authenticates
//	    sandbox.pid              the sandbox process's pid (runsc --pid-file), for WaitExit
//	    runsc.log                runsc's own log and PID 1's stdio: only zygo-guest holds it
//	                             (no other process in the sandbox), and it writes at most
//	                             guest.MaxAgentLogBytes there
//
// Outside the state directory, each instance has a cgroup, Config.CgroupParent/ID in every
// hierarchy, made and removed by runsc, holding its limits (limits.go).
//
// Nothing else of the host is writable from inside.
package gvisor

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zygo-run/zygo/internal/cleanup"
	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox"
)

var (
	_ sandbox.Backend      = (*Backend)(nil)
	_ sandbox.Checkpointer = (*Backend)(nil)
)

// Config configures the gVisor backend. Zero fields take the defaults in brackets.
type Config struct {
	// Runsc is the runsc binary [/usr/local/bin/runsc, else runsc on PATH]. It must be the
	// static build that scripts/install-runsc.sh installs.
	Runsc string
	// StateDir holds everything the backend keeps (see the package doc). Required.
	StateDir string
	// GuestBinary is the static zygo-guest to run as PID 1; copied into StateDir. Required.
	GuestBinary string
	// Platform is runsc's --platform [systrap].
	Platform string
	// CgroupParent is the group under which each instance gets its own, CgroupParent/ID, from
	// the root of every cgroup hierarchy [DefaultCgroupParent]. runsc makes and removes the
	// instance's group and enforces its sandbox.Limits there (limits.go).
	CgroupParent string
	// ExtraFlags are appended to runsc's global flags (e.g. "--debug").
	ExtraFlags []string
	// PollInterval is how often a waiting step checks that the container is still alive
	// [500ms]. Each check is a runsc process that competes with the restores for the CPU
	// (with 11 restores on 2 cores, 100 ms made fork noticeably slower).
	PollInterval time.Duration
	Log          *slog.Logger
}

// Backend runs sandboxes with runsc. Safe for concurrent use on different ids.
type Backend struct {
	cfg       Config
	log       *slog.Logger
	runscRoot string
	rootfs    string
	guestBin  string
	instDir   string
	// cgroupParent is Config.CgroupParent; memsw is whether the host's v1 memory controller
	// accounts swap (memory.memsw.*), so a memory limit can forbid swap on top.
	cgroupParent string
	memsw        bool

	mu    sync.Mutex // guards insts
	insts map[string]*instance
}

// instance is the host side of one running container.
type instance struct {
	id     string
	dir    string
	client *guest.Client
	stop   func() // stops the accept loop and closes its listener
}

// transport is the guest channel of instance dir: its host/ directory, bound read-only at
// guest.HostDir, holding the socket the agent dials and the boot file; both are shared with
// the instance's engine uid as host/ is.
func transport(dir string, uid uint32) *guest.UnixTransport {
	return &guest.UnixTransport{Dir: filepath.Join(dir, "host"), ShareSocket: shareLikeHostDir,
		ShareBoot: func(p string) error { return shareWithEngine(p, uid, 0o640) }}
}

var idRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,63}$`)

// ResolveRunsc returns the runsc binary New uses for Config.Runsc = path: path itself when set,
// else /usr/local/bin/runsc when it exists, else runsc on PATH, else "".
func ResolveRunsc(path string) string {
	if path != "" {
		return path
	}
	if _, err := os.Stat("/usr/local/bin/runsc"); err == nil {
		return "/usr/local/bin/runsc"
	}
	p, _ := exec.LookPath("runsc")
	return p
}

// New checks runsc and prepares the state directory. It returns an error wrapping
// errdefs.ErrUnavailable when runsc is missing, naming scripts/install-runsc.sh.
func New(cfg Config) (*Backend, error) {
	if cfg.StateDir == "" || cfg.GuestBinary == "" {
		return nil, fmt.Errorf("gvisor backend needs StateDir and GuestBinary: %w", errdefs.ErrInvalidArgument)
	}
	cfg.Runsc = ResolveRunsc(cfg.Runsc)
	if _, err := os.Stat(cfg.Runsc); cfg.Runsc == "" || err != nil {
		return nil, fmt.Errorf("runsc not found (install it with scripts/install-runsc.sh): %w", errdefs.ErrUnavailable)
	}
	if cfg.Platform == "" {
		cfg.Platform = "systrap"
	}
	if cfg.CgroupParent == "" {
		cfg.CgroupParent = DefaultCgroupParent
	}
	if !filepath.IsAbs(cfg.CgroupParent) || filepath.Clean(cfg.CgroupParent) != cfg.CgroupParent || cfg.CgroupParent == "/" {
		return nil, fmt.Errorf("cgroup parent %q: want an absolute, clean path such as %q: %w",
			cfg.CgroupParent, DefaultCgroupParent, errdefs.ErrInvalidArgument)
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 500 * time.Millisecond
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	b := &Backend{cfg: cfg, log: cfg.Log, insts: map[string]*instance{},
		runscRoot: filepath.Join(cfg.StateDir, "runsc"), rootfs: filepath.Join(cfg.StateDir, "rootfs"),
		guestBin: filepath.Join(cfg.StateDir, "bin", "zygo-guest"), instDir: filepath.Join(cfg.StateDir, "instances"),
		cgroupParent: cfg.CgroupParent}
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"); err == nil {
		b.memsw = true
	}
	if err := prepareDirs(cfg.StateDir, b.runscRoot, b.instDir, filepath.Dir(b.guestBin)); err != nil {
		return nil, err
	}
	if err := ensureRootfs(b.rootfs); err != nil {
		return nil, err
	}
	if err := installGuest(cfg.GuestBinary, b.guestBin); err != nil {
		return nil, err
	}
	return b, nil
}

// installGuest copies src to dst unless dst already has the same content. Replacing it is
// done by rename, so a running sandbox keeps the inode it mapped.
func installGuest(src, dst string) error {
	want, err := fileHash(src)
	if err != nil {
		return fmt.Errorf("reading guest binary: %w", err)
	}
	if have, err := fileHash(dst); err == nil && have == want {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("opening guest binary: %w", err)
	}
	defer in.Close()
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return fmt.Errorf("installing guest binary: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copying guest binary: %w", err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("copying guest binary: %w", err)
	}
	return os.Rename(tmp, dst)
}

func fileHash(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return fmt.Sprintf("%x", h.Sum(nil)), nil
}

// Name returns "gvisor".
func (b *Backend) Name() string { return "gvisor" }

// RunscRoot returns the directory runsc keeps its container state in (its --root).
func (b *Backend) RunscRoot() string { return b.runscRoot }

// InstanceDir returns the per-instance directory of id (which may not exist).
func (b *Backend) InstanceDir(id string) string { return filepath.Join(b.instDir, id) }

// Create implements sandbox.Backend.
func (b *Backend) Create(ctx context.Context, spec sandbox.Spec) (*sandbox.Instance, error) {
	return b.start(ctx, spec, "")
}

// Restore implements sandbox.Checkpointer.
func (b *Backend) Restore(ctx context.Context, imageDir string, spec sandbox.Spec) (*sandbox.Instance, error) {
	if _, err := os.Stat(filepath.Join(imageDir, "checkpoint.img")); err != nil {
		return nil, fmt.Errorf("image %s: %w", imageDir, errdefs.ErrNotFound)
	}
	if err := b.checkImageBundle(imageDir, spec); err != nil {
		return nil, err
	}
	return b.start(ctx, spec, imageDir)
}

// start creates (imageDir == "") or restores instance spec.ID and waits for its guest. On
// error the undo stack removes everything it made.
func (b *Backend) start(ctx context.Context, spec sandbox.Spec, imageDir string) (_ *sandbox.Instance, err error) {
	if !idRE.MatchString(spec.ID) || spec.Token == "" {
		return nil, fmt.Errorf("instance id %q or token: %w", spec.ID, errdefs.ErrInvalidArgument)
	}
	in := &instance{id: spec.ID, dir: b.InstanceDir(spec.ID)}
	if err := b.reserve(in); err != nil {
		return nil, err
	}
	var undo cleanup.Stack
	defer func() {
		if err != nil {
			if uerr := undo.Run(ctx, 0); uerr != nil {
				b.log.Error("undoing failed start", "engine_id", spec.ID, "err", uerr)
			}
		}
	}()
	undo.Add(func(ctx context.Context) error { return b.Destroy(ctx, spec.ID) })
	hostDir := filepath.Join(in.dir, "host")
	if err := makeInstanceDirs(in.dir, hostDir, spec.HostUID); err != nil {
		return nil, err
	}
	tr := transport(in.dir, spec.HostUID)
	if imageDir == "" {
		if err := tr.PutBoot(spec.Boot); err != nil {
			return nil, err
		}
	}
	if err := b.listen(in, tr, spec.Token); err != nil {
		return nil, err
	}
	if spec.Net != nil {
		if err := os.WriteFile(filepath.Join(in.dir, resolvConfFile), spec.Net.ResolvConf, 0o644); err != nil {
			return nil, fmt.Errorf("writing resolv.conf: %w", err)
		}
	}
	if err := writeJSON(filepath.Join(in.dir, "config.json"), b.bundleSpec(spec, hostDir), 0o600); err != nil {
		return nil, fmt.Errorf("writing bundle: %w", err)
	}
	if err := b.runContainer(ctx, in, imageDir, spec.Net != nil); err != nil {
		return nil, err
	}
	if err := b.waitGuest(ctx, in); err != nil {
		return nil, err
	}
	return &sandbox.Instance{ID: in.id, Guest: in.client}, nil
}

// reserve registers in, or returns an error wrapping errdefs.ErrExists.
func (b *Backend) reserve(in *instance) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.insts[in.id]; ok {
		return fmt.Errorf("instance %s: %w", in.id, errdefs.ErrExists)
	}
	if _, err := os.Stat(in.dir); err == nil {
		return fmt.Errorf("instance dir %s: %w", in.dir, errdefs.ErrExists)
	}
	b.insts[in.id] = in
	return nil
}

// listen starts accepting the guest of in over tr. The boot file holds the first token; the
// guest's directory is read-only to it, so the host removes the file once the agent has
// authenticated, before it starts any service (guest.Connect).
func (b *Backend) listen(in *instance, tr guest.Transport, token string) error {
	client, stop, err := guest.Connect(tr, token, b.log.With("engine_id", in.id))
	if err != nil {
		return err
	}
	b.mu.Lock()
	in.client, in.stop = client, stop
	b.mu.Unlock()
	return nil
}

// resolvConfFile is the instance's /etc/resolv.conf, in its instance dir, bound read-only.
const resolvConfFile = "resolv.conf"

// runContainer runs runsc run (or restore) --detach for in. With network, runsc runs its own
// network stack (--network=sandbox) on the interface of the bundle's network namespace; at a
// restore it rebuilds the stack's interfaces from that namespace, so the copy comes up with the
// namespace's address and MAC, not the image's (the kernel's LoadFrom: ResetConfig, then
// ConfigureNetwork with the restoring runsc's scrape).
func (b *Backend) runContainer(ctx context.Context, in *instance, imageDir string, network bool) error {
	logf, err := os.OpenFile(filepath.Join(in.dir, "runsc.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("opening runsc log: %w", err)
	}
	defer logf.Close()
	// --pid-file gets the sandbox process's pid (runsc/container/container.go at the pinned
	// version: os.WriteFile(args.PIDFile, c.SandboxPid())), which WaitExit watches.
	pidFile := "--pid-file=" + filepath.Join(in.dir, sandboxPIDFile)
	args := []string{"run", "--detach", pidFile, "--bundle=" + in.dir, in.id}
	if imageDir != "" {
		// runsc's own check of the bundle against the image's would refuse a copy that runs
		// as a host uid of its own; checkImageBundle has checked everything else.
		args = []string{"--restore-spec-validation=warning", "restore", "--detach", pidFile,
			"--image-path=" + imageDir, "--bundle=" + in.dir, in.id}
	}
	if network {
		// After the global --network=none: the last value of a flag wins.
		args = append([]string{"--network=sandbox"}, args...)
	}
	if err := b.runscDetached(ctx, logf, args...); err != nil {
		return fmt.Errorf("starting %s: %w: %w", in.id, err, errdefs.ErrUnavailable)
	}
	return nil
}

// waitGuest waits for the guest to connect, checking that the container is still running.
func (b *Backend) waitGuest(ctx context.Context, in *instance) error {
	for {
		wctx, cancel := context.WithTimeout(ctx, b.cfg.PollInterval)
		err := in.client.Wait(wctx)
		cancel()
		if err == nil {
			return nil
		}
		if errors.Is(err, guest.ErrOldGuest) {
			return fmt.Errorf("guest of %s: %w", in.id, err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("waiting for the guest of %s: %w: %w", in.id, ctx.Err(), errdefs.ErrUnavailable)
		}
		// The log's last line goes into the error: a failed start removes the instance dir,
		// log included.
		st, err := b.state(ctx, in.id)
		if err != nil {
			return fmt.Errorf("reading the state of container %s before its guest connected: %w; runsc.log ends: %.300q: %w",
				in.id, err, lastLogLine(filepath.Join(in.dir, "runsc.log")), errdefs.ErrUnavailable)
		}
		if st.Status != "running" {
			return fmt.Errorf("container %s is %q before its guest connected; runsc.log ends: %.300q: %w",
				in.id, st.Status, lastLogLine(filepath.Join(in.dir, "runsc.log")), errdefs.ErrUnavailable)
		}
	}
}

// Attach implements sandbox.Backend.
func (b *Backend) Attach(ctx context.Context, spec sandbox.Spec) (*sandbox.Instance, error) {
	st, err := b.state(ctx, spec.ID)
	if err != nil {
		return nil, err
	}
	if st.Status != "running" {
		return nil, fmt.Errorf("container %s is %s: %w", spec.ID, st.Status, errdefs.ErrFailedPrecondition)
	}
	in := &instance{id: spec.ID, dir: b.InstanceDir(spec.ID)}
	b.mu.Lock()
	if old := b.insts[spec.ID]; old != nil {
		b.mu.Unlock()
		return &sandbox.Instance{ID: old.id, Guest: old.client}, nil
	}
	b.insts[spec.ID] = in
	b.mu.Unlock()
	if err := b.listen(in, transport(in.dir, 0), spec.Token); err != nil { // no boot: shares nothing but the socket
		b.forget(spec.ID)
		return nil, err
	}
	if err := b.waitGuest(ctx, in); err != nil {
		b.forget(spec.ID)
		return nil, err
	}
	return &sandbox.Instance{ID: in.id, Guest: in.client}, nil
}

// forget closes the host side of id (listener, client) and drops it; the container is left.
func (b *Backend) forget(id string) *instance {
	b.mu.Lock()
	in := b.insts[id]
	delete(b.insts, id)
	b.mu.Unlock()
	if in != nil {
		if in.stop != nil {
			in.stop()
			in.client.Close()
		}
	}
	return in
}

// Checkpoint implements sandbox.Checkpointer. The image is written to a hidden sibling
// directory and renamed into place only when runsc succeeded.
func (b *Backend) Checkpoint(ctx context.Context, id, imageDir string) error {
	b.mu.Lock()
	in := b.insts[id]
	b.mu.Unlock()
	if in == nil || in.client == nil {
		return fmt.Errorf("instance %s: %w", id, errdefs.ErrNotFound)
	}
	if _, err := os.Stat(imageDir); err == nil {
		return fmt.Errorf("image dir %s: %w", imageDir, errdefs.ErrExists)
	}
	tmp := filepath.Join(filepath.Dir(imageDir), "."+filepath.Base(imageDir)+".partial")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return fmt.Errorf("making image dir: %w", err)
	}
	epoch := in.client.Epoch()
	_, err := b.runsc(ctx, "checkpoint", "--leave-running", "--image-path="+tmp, id)
	in.client.ResetUpTo(epoch) // the guest's connection died inside; it dials again
	if err == nil {
		err = saveImageBundle(in.dir, tmp)
	}
	if err == nil {
		err = os.Rename(tmp, imageDir)
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		if ctx.Err() != nil { // the call's deadline ended runsc: the sandbox did not answer
			return fmt.Errorf("checkpointing %s: the sandbox's engine did not answer in time (frozen or overloaded): %w: %w",
				id, errdefs.ErrDeadlineExceeded, err)
		}
		return fmt.Errorf("checkpointing %s: %w", id, err)
	}
	if err := b.waitGuest(ctx, in); err != nil {
		_ = os.RemoveAll(imageDir) // complete, but the call failed: created not at all
		return fmt.Errorf("reconnecting after checkpoint: %w", err)
	}
	return nil
}

// Destroy implements sandbox.Backend: kill and delete the container, close the host side,
// remove the instance's cgroup (runsc's delete does; what it left, an empty group of a
// container runsc no longer knows, is removed here) and the instance directory. An unknown id
// returns nil.
func (b *Backend) Destroy(ctx context.Context, id string) error {
	if !idRE.MatchString(id) {
		return nil // nothing we could have made
	}
	b.forget(id)
	if err := b.deleteContainer(ctx, id); err != nil {
		return fmt.Errorf("deleting container %s: %w", id, err)
	}
	if err := b.removeCgroup(id); err != nil {
		return err
	}
	if err := os.RemoveAll(b.InstanceDir(id)); err != nil {
		return fmt.Errorf("removing instance dir %s: %w", id, err)
	}
	return nil
}

// List implements sandbox.Backend: the containers under our runsc root and the instance
// directories without one.
func (b *Backend) List(ctx context.Context) ([]string, error) {
	sts, err := b.list(ctx)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var ids []string
	for _, st := range sts {
		seen[st.ID] = true
		ids = append(ids, st.ID)
	}
	ents, _ := os.ReadDir(b.instDir)
	for _, e := range ents {
		if !seen[e.Name()] && !strings.HasPrefix(e.Name(), ".") {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// Close closes the host side of every instance (listeners, guest connections) and leaves the
// containers running, as a daemon that stops does; a new Backend adopts them with Attach.
func (b *Backend) Close() error {
	b.mu.Lock()
	ids := make([]string, 0, len(b.insts))
	for id := range b.insts {
		ids = append(ids, id)
	}
	b.mu.Unlock()
	for _, id := range ids {
		b.forget(id)
	}
	return nil
}

// ReleaseHost undoes what runsc itself leaves on the host for the whole runsc root, not for
// one sandbox: the bind mount of its shared empty network namespace (RunscRoot/null-netns,
// made for --network=none), and the cgroup parent (Config.CgroupParent) when no other
// daemon's sandboxes are in it. Call it before deleting StateDir; it returns an error wrapping
// errdefs.ErrFailedPrecondition while containers remain.
func (b *Backend) ReleaseHost(ctx context.Context) error {
	sts, err := b.list(ctx)
	if err != nil {
		return fmt.Errorf("listing the containers under %s: %w: %w", b.runscRoot, err, errdefs.ErrFailedPrecondition)
	}
	if len(sts) > 0 {
		return fmt.Errorf("%d containers remain under %s: %w", len(sts), b.runscRoot, errdefs.ErrFailedPrecondition)
	}
	p := filepath.Join(b.runscRoot, "null-netns")
	if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmounting %s: %w", p, err)
	}
	b.removeCgroupParent()
	return nil
}

var _ sandbox.GenerationReader = (*Backend)(nil)

// maxGenerationRead bounds ReadGeneration: a generation is 32 hex digits.
const maxGenerationRead = 64

// ReadGeneration reads /run/zygo/generation inside instance id with `runsc exec`, outside the
// guest agent's channel (see sandbox.GenerationReader). It returns the trimmed contents. The
// file is the sandbox's to change (a symlink to a huge file, or /dev/zero), so at most
// maxGenerationRead bytes are read: more fails the call.
func (b *Backend) ReadGeneration(ctx context.Context, id string) (string, error) {
	out, err := b.runscStdout(ctx, maxGenerationRead, "exec", id, "/usr/bin/cat", "/run/zygo/generation")
	if err != nil {
		return "", fmt.Errorf("reading the generation of %s: %w: %w", id, err, errdefs.ErrUnavailable)
	}
	return strings.TrimSpace(string(out)), nil
}
