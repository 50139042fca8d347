package seccomp

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDefaultFilterUnderBwrap loads the default filter through bubblewrap, as
// the ns backend does, and checks that a denied syscall fails with EPERM
// while ordinary work still succeeds.
func TestDefaultFilterUnderBwrap(t *testing.T) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		t.Fatalf("bwrap not found: install it with `apt-get install -y bubblewrap` (or `make deps`)")
	}
	prog, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	if len(prog)%8 != 0 || len(prog) < 8*len(DefaultDenied) {
		t.Fatalf("program of %d bytes is not a plausible sock_filter array", len(prog))
	}
	f, err := os.CreateTemp("", "seccomp")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	f.Write(prog)
	f.Seek(0, 0)
	script := `
import ctypes, os, errno
libc = ctypes.CDLL(None, use_errno=True)
r = libc.syscall(165, b"none", b"/tmp", b"tmpfs", 0, None)  # mount(2) on x86_64
print("mount", r, errno.errorcode.get(ctypes.get_errno()))
r = libc.syscall(272, 0)  # unshare(0)
print("unshare", r, errno.errorcode.get(ctypes.get_errno()))
print("getpid-ok", os.getpid() > 0)
`
	cmd := exec.Command(bwrap, "--unshare-user", "--unshare-pid", "--ro-bind", "/usr", "/usr",
		"--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/bin", "/bin",
		"--proc", "/proc", "--dev", "/dev", "--seccomp", "3", "/usr/bin/python3", "-c", script)
	cmd.ExtraFiles = []*os.File{f}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bwrap: %v\n%s", err, out)
	}
	for _, want := range []string{"mount -1 EPERM", "unshare -1 EPERM", "getpid-ok True"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestDefaultFilterRefusesOtherProcesses loads the default filter through
// bubblewrap and calls each SelfOnly syscall on another process of the
// sandbox (a sleeping child of the same uid, which the kernel alone would
// let it change), on the caller's own process group and uid, and with a pid
// hidden in the upper 32 bits of the argument: each fails with EPERM. The
// same calls on pid 0 (the caller) succeed, and reading another process's
// limits is still allowed. SysV shared memory and message queues (kept past
// a request, uncapped) are refused; semaphores (a few bytes) are not.
func TestDefaultFilterRefusesOtherProcesses(t *testing.T) {
	script := fmt.Sprintf(`
import ctypes, errno, os, resource, struct, subprocess
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def raw(nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_ulong(a) if isinstance(a, int) else a for a in args])
    return "ok" if r >= 0 else errno.errorcode.get(ctypes.get_errno())
def py(fn, *args):
    try:
        fn(*args)
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno)
other = subprocess.Popen(["sleep", "60"]).pid
# A nice value no lower than the current one: lowering it needs CAP_SYS_NICE,
# and the suite may run under nice(1).
nice = max(5, os.getpriority(os.PRIO_PROCESS, 0))
attr = ctypes.create_string_buffer(struct.pack("=IIQiIQQQII", 56, 0, 0, nice, 0, 0, 0, 0, 0, 0))
old = ctypes.create_string_buffer(16)
res = {}
for name, target in (("other", other), ("self", 0)):
    res["prlimit_set_" + name] = py(resource.prlimit, target, resource.RLIMIT_FSIZE, resource.getrlimit(resource.RLIMIT_FSIZE))
    res["prlimit_get_" + name] = py(resource.prlimit, target, resource.RLIMIT_NOFILE)
    res["setpriority_" + name] = py(os.setpriority, os.PRIO_PROCESS, target, nice)
    res["setaffinity_" + name] = py(os.sched_setaffinity, target, os.sched_getaffinity(0))
    res["setscheduler_" + name] = py(os.sched_setscheduler, target, os.SCHED_OTHER, os.sched_param(0))
    res["setparam_" + name] = py(os.sched_setparam, target, os.sched_param(0))
    res["setattr_" + name] = raw(%d, target, attr, 0)
    res["ioprio_set_" + name] = raw(%d, 1, target, 0)
res["setpriority_pgrp"] = py(os.setpriority, os.PRIO_PGRP, 0, nice)
res["setpriority_user"] = py(os.setpriority, os.PRIO_USER, 0, nice)
res["ioprio_set_pgrp"] = raw(%d, 2, 0, 0)
res["ioprio_set_user"] = raw(%d, 3, 0, 0)
res["prlimit_set_hidden"] = raw(%d, (1 << 32) | other, resource.RLIMIT_FSIZE, old, None) if raw(%d, 0, resource.RLIMIT_FSIZE, None, old) == "ok" else "getfailed"
res["shmget"] = raw(%d, 0, 1 << 20, 0o1000 | 0o600)
res["msgget"] = raw(%d, 0, 0o1000 | 0o600)
res["semget"] = raw(%d, 0, 1, 0o1000 | 0o600)
res["own_nofile"] = resource.getrlimit(resource.RLIMIT_NOFILE)[0] > 3
for k in sorted(res):
    print(k, res[k])
`, unix.SYS_SCHED_SETATTR, unix.SYS_IOPRIO_SET, unix.SYS_IOPRIO_SET, unix.SYS_IOPRIO_SET, unix.SYS_PRLIMIT64, unix.SYS_PRLIMIT64,
		unix.SYS_SHMGET, unix.SYS_MSGGET, unix.SYS_SEMGET)
	out := runUnderBwrap(t, script)
	want := []string{
		"prlimit_set_other EPERM", "prlimit_get_other ok", "prlimit_set_self ok", "prlimit_get_self ok",
		"setpriority_other EPERM", "setpriority_self ok", "setpriority_pgrp EPERM", "setpriority_user EPERM",
		"setaffinity_other EPERM", "setaffinity_self ok",
		"setscheduler_other EPERM", "setscheduler_self ok",
		"setparam_other EPERM", "setparam_self ok",
		"setattr_other EPERM", "setattr_self ok",
		"ioprio_set_other EPERM", "ioprio_set_self ok", "ioprio_set_pgrp EPERM", "ioprio_set_user EPERM",
		"prlimit_set_hidden EPERM", "own_nofile True",
		"shmget EPERM", "msgget EPERM", "semget EPERM",
	}
	for _, w := range want {
		if !strings.Contains(out, w+"\n") {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

// runUnderBwrap runs a Python script in a bubblewrap sandbox under the
// default filter and returns its combined output.
func runUnderBwrap(t *testing.T, script string) string {
	t.Helper()
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		t.Fatalf("bwrap not found: install it with `apt-get install -y bubblewrap` (or `make deps`)")
	}
	prog, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp("", "seccomp")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	f.Write(prog)
	f.Seek(0, 0)
	cmd := exec.Command(bwrap, "--unshare-user", "--unshare-pid", "--die-with-parent", "--ro-bind", "/usr", "/usr",
		"--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/bin", "/bin",
		"--proc", "/proc", "--dev", "/dev", "--seccomp", "3", "/usr/bin/python3", "-c", script)
	cmd.ExtraFiles = []*os.File{f}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bwrap: %v\n%s", err, out)
	}
	return string(out)
}

// TestDefaultFilterRefusesNewNamespaces loads the default filter through
// bubblewrap (without --disable-userns: the filter must hold on its own) and
// asks for each namespace clone(2) can make, alone and with CLONE_NEWUSER:
// each fails with EPERM, unshare(CLONE_NEWUSER) with EPERM, and clone3 with
// ENOSYS, while fork, a thread, subprocess and multiprocessing still work
// (glibc falls back from clone3 to clone).
func TestDefaultFilterRefusesNewNamespaces(t *testing.T) {
	script := fmt.Sprintf(`
import ctypes, errno, multiprocessing, os, subprocess, threading
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def clone(flags):
    pid = libc.syscall(ctypes.c_long(%d), ctypes.c_ulong(flags | 17), None, None, None, ctypes.c_ulong(0))
    if pid == 0:
        os._exit(0)
    if pid > 0:
        os.waitpid(pid, 0)
        return "ok"
    return errno.errorcode.get(ctypes.get_errno())
res = {}
for name, flag in (("newns", 0x20000), ("newcgroup", 0x02000000), ("newuts", 0x04000000),
                   ("newipc", 0x08000000), ("newuser", 0x10000000), ("newpid", 0x20000000),
                   ("newnet", 0x40000000)):
    res["clone_" + name] = clone(flag)
    res["clone_newuser_" + name] = clone(flag | 0x10000000)
res["clone_plain"] = clone(0)
res["unshare_newuser"] = "ok" if libc.unshare(0x10000000) == 0 else errno.errorcode.get(ctypes.get_errno())
args = (ctypes.c_ulong * 11)(0x10000000, 0, 0, 0, 17, 0, 0, 0, 0, 0, 0)  # struct clone_args
r = libc.syscall(ctypes.c_long(%d), args, ctypes.c_size_t(88))
if r == 0:
    os._exit(0)
res["clone3"] = "ok" if r > 0 else errno.errorcode.get(ctypes.get_errno())
pid = os.fork()
if pid == 0:
    os._exit(7)
res["fork"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
box = []
th = threading.Thread(target=lambda: box.append(1)); th.start(); th.join()
res["thread"] = box
res["subprocess"] = subprocess.run(["true"]).returncode
ctx = multiprocessing.get_context("fork")
p = ctx.Process(target=int); p.start(); p.join()
res["multiprocessing"] = p.exitcode
for k in sorted(res):
    print(k, res[k])
`, unix.SYS_CLONE, unix.SYS_CLONE3)
	out := runUnderBwrap(t, script)
	want := []string{"clone_plain ok", "unshare_newuser EPERM", "clone3 ENOSYS", "fork 7", "thread [1]",
		"subprocess 0", "multiprocessing 0"}
	for _, ns := range []string{"newns", "newcgroup", "newuts", "newipc", "newuser", "newpid", "newnet"} {
		want = append(want, "clone_"+ns+" EPERM", "clone_newuser_"+ns+" EPERM")
	}
	for _, w := range want {
		if !strings.Contains(out, w+"\n") {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}
