// Package nsbox is Zygo's namespace sandbox backend: it builds the
// bubblewrap (bwrap) command line that starts a language agent in fresh
// user, pid, mount, ipc, uts, net and cgroup namespaces, as a non-root uid
// with every capability dropped, on a read-only root made only of what the
// runtime needs, under the default seccomp filter (internal/seccomp).
//
// The agent is PID 1 of its pid namespace (bwrap --as-pid-1): there is no
// bwrap init inside for a request to reach, the agent makes itself
// non-dumpable before it runs user code (the Python zygote) or is the request
// itself (spawn mode, a Node worker), and when PID 1 exits or is killed the
// kernel kills every other process of the namespace. The bwrap process the
// supervisor starts stays outside the namespace and waits for PID 1.
//
// nsbox never forks a Go process itself: the namespaces are made by bwrap,
// which the supervisor starts with os/exec.
package nsbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/zygo-run/zygo/internal/seccomp"
)

// In-sandbox paths. docs/protocol.md and the agents use the same values.
const (
	CodeDir    = "/code"            // the function's version, read-only
	AgentDir   = "/opt/zygo/agents" // the language agents, read-only
	ReqDir     = "/run/zygo/req"    // request directories (host-backed)
	SecretsDir = "/run/secrets"     // secret files (host-backed, read-only mount)
	SandboxUID = 1000               // uid and gid inside the sandbox
	Hostname   = "zygo"             // uts hostname inside the sandbox
	passwdLine = "zygo:x:1000:1000:zygo:/tmp:/usr/sbin/nologin\n"
)

// Spec describes one sandbox.
type Spec struct {
	Bwrap       string   // path of the bwrap binary
	HostUID     uint32   // host uid (and gid) bwrap runs as; 0 keeps the caller's
	Interpreter string   // absolute path of the interpreter, run as argv[0]
	Args        []string // arguments after the interpreter
	Env         []string // the complete environment, KEY=VALUE
	CodeDir     string   // host dir bound at /code, read-only
	AgentDir    string   // host dir bound at /opt/zygo/agents, read-only
	ReqDir      string   // host dir bound at /run/zygo/req, read-write
	TmpDir      string   // host dir bound at /tmp, read-write (private to this sandbox)
	ShmDir      string   // host dir bound at /dev/shm, read-write (private to this sandbox); "" leaves /dev/shm read-only
	SecretsDir  string   // host dir bound at /run/secrets read-only; "" for none
	EtcDir      string   // host dir holding generated passwd, group, hosts
	// NetNS, when set, is the path of a network namespace (internal/network,
	// Endpoint.NetNSPath) the sandbox joins instead of a new empty one
	// (--unshare-net): Start execs bwrap from a thread that has entered it.
	// The sandbox's user namespace does not own it, so nothing inside can
	// change its addresses, routes or filter. "" keeps --unshare-net.
	NetNS string
	// ResolvConf is the content of the sandbox's /etc/resolv.conf (bound
	// read-only from a memfd); "" for none.
	ResolvConf string
	// Preload is the in-sandbox path of a shared object the interpreter
	// preloads (LD_PRELOAD, given with bwrap --setenv so that bwrap itself
	// does not load it); "" for none. The Python zygote's native-randomness
	// guard (RandGuardPath) removes itself from the environment at load.
	Preload string
}

// RandGuardPath is where the native-randomness guard (agents/native/zygo_rand.c,
// built as bin/zygo_rand.so) sits in a sandbox: under AgentDir.
const RandGuardPath = AgentDir + "/native/zygo_rand.so"

// Files the sandbox gets as inherited descriptors. The caller owns them and
// closes its copies after Start.
type Files struct {
	Control *os.File // becomes fd 3 in the sandbox
	Status  *os.File // write end for bwrap's --json-status-fd (host pid, exit code); may be nil
	// Block is the read end of a pipe for bwrap's --block-fd: the sandbox's
	// process, once made (and reported on Status), waits before it runs the
	// command until one byte arrives, so that the caller can put it in a
	// cgroup first. End of file releases it too: the caller must kill the
	// sandbox, not close the write end, to refuse it. May be nil.
	Block *os.File
}

// Command returns an unstarted bwrap command for spec. Its stdin is
// /dev/null; the caller sets Stdout and Stderr. The seccomp program is
// passed through an unlinked temporary file that the caller must not close
// before Start (it is in cmd.ExtraFiles; closing it after Start is the
// caller's job, via CloseExtra).
func Command(spec Spec, files Files) (*exec.Cmd, error) {
	if err := WriteEtc(spec.EtcDir); err != nil {
		return nil, err
	}
	prog, err := seccomp.Default()
	if err != nil {
		return nil, err
	}
	sf, err := os.CreateTemp("", "zygo-seccomp-")
	if err != nil {
		return nil, fmt.Errorf("writing seccomp program: %w", err)
	}
	os.Remove(sf.Name())
	if _, err := sf.Write(prog); err != nil {
		sf.Close()
		return nil, fmt.Errorf("writing seccomp program: %w", err)
	}
	if _, err := sf.Seek(0, 0); err != nil {
		sf.Close()
		return nil, err
	}
	if spec.HostUID != 0 {
		_ = sf.Chown(int(spec.HostUID), int(spec.HostUID))
	}
	extra := []*os.File{files.Control, sf} // fd 3, fd 4
	if spec.ResolvConf != "" {
		rf, err := dataFile(resolvName, spec.ResolvConf)
		if err != nil {
			sf.Close()
			return nil, err
		}
		extra = append(extra, rf) // resolvFD, named in baseArgs
	}
	args := baseArgs(spec)
	args = append(args, "--seccomp", "4")
	if files.Status != nil {
		extra = append(extra, files.Status) // fd 5 or 6
		args = append(args, "--json-status-fd", fmt.Sprint(2+len(extra)))
	}
	if files.Block != nil {
		extra = append(extra, files.Block) // fd 5, 6 or 7
		args = append(args, "--block-fd", fmt.Sprint(2+len(extra)))
	}
	args = append(args, "--", spec.Interpreter)
	args = append(args, spec.Args...)
	cmd := exec.Command(spec.Bwrap, args...)
	cmd.Env = spec.Env
	cmd.ExtraFiles = extra
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if spec.HostUID != 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: spec.HostUID, Gid: spec.HostUID}
	}
	return cmd, nil
}

// CloseExtra closes the files Command created (the seccomp program, fd 4,
// and the resolv.conf data); call it after cmd.Start.
func CloseExtra(cmd *exec.Cmd) {
	if len(cmd.ExtraFiles) > 1 {
		cmd.ExtraFiles[1].Close()
	}
	if len(cmd.ExtraFiles) > 2 && cmd.ExtraFiles[2].Name() == resolvName {
		cmd.ExtraFiles[2].Close()
	}
}

// resolvName names the memfd of Spec.ResolvConf, which Command passes as
// resolvFD (after the seccomp program) when there is one.
const (
	resolvName = "zygo-resolv.conf"
	resolvFD   = 5
)

// dataFile returns a memfd holding body, at offset 0 (bwrap reads it whole).
func dataFile(name, body string) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	if _, err := f.WriteString(body); err != nil {
		f.Close()
		return nil, fmt.Errorf("writing %s: %w", name, err)
	}
	if _, err := f.Seek(0, 0); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Start starts cmd (from Command) in spec's network namespace: when
// spec.NetNS is set, from an OS thread that has entered it, so that bwrap
// is born there; the thread goes back to the daemon's namespace after, or
// is thrown away if it cannot. Errors: opening or entering the namespace
// (a removed endpoint), or cmd.Start's.
func Start(cmd *exec.Cmd, spec Spec) error {
	if spec.NetNS == "" {
		return cmd.Start()
	}
	target, err := os.Open(spec.NetNS)
	if err != nil {
		return fmt.Errorf("opening the function's network namespace: %w", err)
	}
	defer target.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("entering the function's network namespace: %w", err)
			return
		}
		// Pdeathsig follows this thread: it must outlive the sandbox, so
		// it goes back to the pool (not ended) once it is home again.
		startErr := cmd.Start()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			if startErr == nil {
				_ = cmd.Process.Kill()
				_, _ = cmd.Process.Wait()
			}
			errc <- fmt.Errorf("returning to the daemon's network namespace: %w", err) // the thread stays locked and ends
			return
		}
		runtime.UnlockOSThread()
		errc <- startErr
	}()
	return <-errc
}

func baseArgs(spec Spec) []string {
	uid := fmt.Sprint(SandboxUID)
	a := []string{
		"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		// No user namespace inside: max_user_namespaces is 1 and the agent
		// runs in a nested one that cannot raise it (ENOSPC), so a request
		// cannot get capabilities of its own even past the seccomp filter.
		"--disable-userns",
		// The agent itself is PID 1: no bwrap init (same uid, dumpable) for
		// a request to take over, and killing PID 1 kills the namespace.
		"--as-pid-1",
		"--uid", uid, "--gid", uid, "--hostname", Hostname,
		"--cap-drop", "ALL", "--die-with-parent", "--new-session",
		"--ro-bind", "/usr", "/usr",
		"--symlink", "usr/bin", "/bin", "--symlink", "usr/sbin", "/sbin",
		"--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
		"--proc", "/proc", "--dev", "/dev",
	}
	// bwrap's /dev is a tmpfs of its own with no size or inode cap, which
	// --remount-ro / does not reach: make it read-only, and give /dev/shm
	// (POSIX shared memory and semaphores) a capped host dir instead.
	if spec.ShmDir != "" {
		a = append(a, "--bind", spec.ShmDir, "/dev/shm")
	}
	a = append(a, "--remount-ro", "/dev")
	if spec.NetNS == "" {
		a = append(a, "--unshare-net") // Start puts it in spec.NetNS otherwise
	}
	// TLS clients need the CA certificates and OpenSSL's config, never /etc/ssl/private.
	for _, p := range []string{"/etc/ld.so.cache", "/etc/alternatives", "/etc/ssl/certs", "/etc/ssl/openssl.cnf", "/etc/localtime", "/usr/share/zoneinfo"} {
		a = append(a, "--ro-bind-try", p, p)
	}
	for _, f := range []string{"passwd", "group", "hosts"} {
		a = append(a, "--ro-bind", filepath.Join(spec.EtcDir, f), "/etc/"+f)
	}
	if spec.ResolvConf != "" {
		a = append(a, "--ro-bind-data", fmt.Sprint(resolvFD), "/etc/resolv.conf")
	}
	a = append(a,
		"--ro-bind", spec.CodeDir, CodeDir,
		"--ro-bind", spec.AgentDir, AgentDir,
		"--bind", spec.TmpDir, "/tmp",
		"--bind", spec.ReqDir, ReqDir,
	)
	// After /tmp: an interpreter of a virtual environment under the host's /tmp
	// (/tmp/x/venv/bin/python) is bound over the sandbox's private /tmp, at the
	// same path, so that Python finds its pyvenv.cfg next to it.
	if prefix := interpreterPrefix(spec.Interpreter); prefix != "" {
		a = append(a, "--ro-bind", prefix, prefix)
	}
	if spec.SecretsDir != "" {
		a = append(a, "--ro-bind", spec.SecretsDir, SecretsDir)
	}
	if spec.Preload != "" {
		a = append(a, "--setenv", "LD_PRELOAD", spec.Preload)
	}
	a = append(a, "--chdir", CodeDir, "--remount-ro", "/")
	return a
}

// interpreterPrefix returns the directory to bind for an interpreter that
// lives outside /usr (for example /opt/python3.12/bin/python3 → /opt/python3.12),
// or "" when /usr already covers it.
func interpreterPrefix(interp string) string {
	if strings.HasPrefix(interp, "/usr/") {
		return ""
	}
	dir := filepath.Dir(interp)
	if filepath.Base(dir) == "bin" {
		dir = filepath.Dir(dir)
	}
	if dir == "/" {
		return ""
	}
	return dir
}

// WriteEtc writes the sandbox's passwd, group and hosts into dir (created
// 0755 if missing). The files are the same for every sandbox.
func WriteEtc(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("writing sandbox /etc: %w", err)
	}
	files := map[string]string{
		"passwd": "root:x:0:0:root:/root:/usr/sbin/nologin\n" + passwdLine,
		"group":  "root:x:0:\nzygo:x:1000:\n",
		"hosts":  "127.0.0.1 localhost " + Hostname + "\n::1 localhost\n",
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if b, err := os.ReadFile(p); err == nil && string(b) == body {
			continue
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			return fmt.Errorf("writing sandbox /etc/%s: %w", name, err)
		}
	}
	return nil
}

// ThreadEnv is the environment that keeps native thread pools at one thread
// in the zygote, so that it stays single-threaded and safe to fork (case
// BH-12). Users may raise them per request inside the handler.
var ThreadEnv = []string{
	"OPENBLAS_NUM_THREADS=1", "OMP_NUM_THREADS=1", "MKL_NUM_THREADS=1",
	"NUMEXPR_NUM_THREADS=1", "VECLIB_MAXIMUM_THREADS=1", "GOTO_NUM_THREADS=1",
}
