package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Every sandbox (a fork zygote, a spawned agent, a Node worker) is in a
// cgroup of its own, with zygote_memory_mib and zygote_pids, from before its
// agent runs: what an import allocates or starts is bounded, and is never
// charged to the daemon's cgroup.

// hogImport allocates and touches 200 MiB at import.
const hogImport = `
HOG = bytearray(200 * 1024 * 1024)
for i in range(0, len(HOG), 4096):
    HOG[i] = 1

def handler(event, ctx):
    return "unreachable"
`

// forkImport starts 40 sleeping processes at import (each sleeps 300 s at
// most and would die with the sandbox anyway).
const forkImport = `
import os, time
for _ in range(40):
    if os.fork() == 0:
        time.sleep(300)
        os._exit(0)

def handler(event, ctx):
    return "unreachable"
`

func TestZygoteMemoryLimitFailsDeploy(t *testing.T) {
	d := startDaemon(t, "")
	dir := writeFunction(t, map[string]string{
		"zygo.toml": "name = \"zhog\"\nruntime = \"python\"\nhandler = \"main:handler\"\nprefork = 0\n[limits]\nzygote_memory_mib = 64\n",
		"main.py":   hogImport,
	})
	_, errOut, code := d.CLI("up", dir)
	if code == 0 || !strings.Contains(errOut, "import exceeded zygote_memory_mib: 64 MiB") {
		t.Fatalf("zygo up of a 200 MiB import with zygote_memory_mib = 64: exit %d, stderr %q\ndaemon log:\n%s", code, errOut, d.Log)
	}
	t.Logf("zygo up: %s", errOut)
	checkNothingLeft(t, d, "zhog")
}

// The forks past the limit get EAGAIN (BlockingIOError in Python): the
// import fails, and the deploy's error says which limit refused them.
func TestZygotePIDsLimitFailsDeploy(t *testing.T) {
	d := startDaemon(t, "")
	dir := writeFunction(t, map[string]string{
		"zygo.toml": "name = \"zfork\"\nruntime = \"python\"\nhandler = \"main:handler\"\nprefork = 0\n[limits]\nzygote_pids = 16\n",
		"main.py":   forkImport,
	})
	_, errOut, code := d.CLI("up", dir)
	if code == 0 || !strings.Contains(errOut, "BlockingIOError") || !strings.Contains(errOut, "import exceeded zygote_pids: 16") {
		t.Fatalf("zygo up of an import forking 40 processes with zygote_pids = 16: exit %d, stderr %q\ndaemon log:\n%s", code, errOut, d.Log)
	}
	t.Logf("zygo up: %s", errOut)
	checkNothingLeft(t, d, "zfork")
}

func TestZygoteHasItsOwnCgroup(t *testing.T) {
	d := startDaemon(t, "")
	dir := writeFunction(t, map[string]string{
		"zygo.toml": "name = \"zown\"\nruntime = \"python\"\nhandler = \"main:handler\"\n",
		"main.py":   "def handler(event, ctx):\n    return open('/proc/self/cgroup').read()\n",
	})
	d.Up(dir)
	ls, err := d.Client.Functions(context.Background())
	if err != nil || len(ls) != 1 || ls[0].ZygotePID == 0 {
		t.Fatalf("zygote pid: %v, %+v", err, ls)
	}
	zpid := ls[0].ZygotePID
	fnGroup := cgroupParent(t, d) + "/zown/"
	var zgroups []string
	for _, ctrl := range []string{"memory", "pids"} {
		zg, dg := cgroupOf(t, zpid, ctrl), cgroupOf(t, d.Cmd.Process.Pid, ctrl)
		if !strings.HasPrefix(zg, fnGroup+"z-") || zg == dg {
			t.Fatalf("zygote's %s cgroup is %q (daemon's %q), want its own under %sz-", ctrl, zg, dg, fnGroup)
		}
		if !groupExists(ctrl, zg) {
			t.Fatalf("zygote's %s cgroup %s has no directory", ctrl, zg)
		}
		zgroups = append(zgroups, ctrl+":"+zg)
	}
	// A request is still moved to a group of its own, beside the zygote's
	// (inside the sandbox the path is relative to its cgroup namespace): one
	// of the function's request groups, /zown/pN, kept between requests.
	var cg string
	d.Invoke("zown", map[string]any{}, &cg)
	own := regexp.MustCompile(`/zown/p[0-9]+$`)
	for _, ctrl := range []string{"memory", "pids"} {
		if p := cgroupLine(cg, ctrl); !own.MatchString(p) {
			t.Errorf("request's %s cgroup is %q, want one ending in /zown/pN (all: %q)", ctrl, p, cg)
		}
	}
	if _, errOut, code := d.CLI("rm", "zown"); code != 0 {
		t.Fatalf("zygo rm: exit %d: %s", code, errOut)
	}
	for _, cg := range zgroups {
		ctrl, p, _ := strings.Cut(cg, ":")
		if groupExists(ctrl, p) {
			t.Errorf("after zygo rm the zygote's %s cgroup %s is still there", ctrl, p)
		}
	}
	checkNothingLeft(t, d, "zown")
}

// A serving zygote killed by its own limit is restarted, and the logs say
// which limit. The zygote holds 40 MiB; a helper it started at import
// adds 40 MiB when a request asks it to (a file in /tmp, shared by the
// zygote and its requests): over zygote_memory_mib = 64, the OOM killer
// takes the biggest process of the group, the zygote.
func TestZygoteKilledByLimitIsRestarted(t *testing.T) {
	d := startDaemon(t, "")
	dir := writeFunction(t, map[string]string{
		"zygo.toml": "name = \"zlate\"\nruntime = \"python\"\nhandler = \"main:handler\"\nprefork = 0\n[limits]\nzygote_memory_mib = 64\n",
		"main.py": `
import os, time
if os.fork() == 0:
    for _ in range(6000):
        if os.path.exists("/tmp/grow"):
            more = bytearray(40 * 1024 * 1024)
            for i in range(0, len(more), 4096):
                more[i] = 1
            time.sleep(300)
        time.sleep(0.05)
    os._exit(0)
HELD = bytearray(40 * 1024 * 1024)
for i in range(0, len(HELD), 4096):
    HELD[i] = 1

def handler(event, ctx):
    open("/tmp/grow", "w").close()
    return os.getppid()
`,
	})
	d.Up(dir)
	d.Invoke("zlate", map[string]any{}, nil)
	deadline := time.Now().Add(60 * time.Second)
	for {
		logs := strings.Join(d.Logs("zlate", ""), "\n")
		if strings.Contains(logs, "zygote died") && strings.Contains(logs, "exceeded zygote_memory_mib: 64 MiB") {
			t.Logf("logs:\n%s", logs)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line says the zygote died of zygote_memory_mib:\n%s\ndaemon log:\n%s", logs, d.Log)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Restarted: served again (the new zygote's /tmp has no trigger file).
	d.Invoke("zlate", map[string]any{}, nil)
}

// checkNothingLeft fails unless function fn has no cgroup directory left
// and no process of the daemon's sandboxes (bwrap's command line names the
// state dir) is alive.
func checkNothingLeft(t *testing.T, d *Daemon, fn string) {
	t.Helper()
	dir := cgroupParent(t, d) + "/" + fn
	for _, ctrl := range []string{"memory", "pids"} {
		if groupExists(ctrl, dir) {
			ents, _ := os.ReadDir(groupDir(ctrl, dir))
			t.Errorf("%s cgroup %s is left behind (%d entries)", ctrl, dir, len(ents))
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		pid, _ := strconv.Atoi(strings.Split(p, "/")[2])
		b, err := os.ReadFile(p)
		if err != nil || pid == d.Cmd.Process.Pid || !strings.Contains(string(b), d.StateDir) {
			continue
		}
		if strings.Contains(string(b), "bwrap") || strings.Contains(string(b), "zygo_agent") {
			t.Errorf("process %d is left behind: %q", pid, strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
}

// cgroupParent is the daemon's group from the root of every hierarchy
// (internal/daemon newLimiter: /zygo/<first 6 bytes of sha256(state dir)>).
func cgroupParent(t *testing.T, d *Daemon) string {
	abs, err := filepath.Abs(d.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(abs))
	return "/zygo/" + hex.EncodeToString(sum[:6])
}

// cgroupOf returns pid's group in the hierarchy of ctrl (v1), or its
// unified group (v2).
func cgroupOf(t *testing.T, pid int, ctrl string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatalf("reading cgroups of %d: %v", pid, err)
	}
	return cgroupLine(string(b), ctrl)
}

// cgroupLine picks ctrl's path out of a /proc/PID/cgroup text: the v1 line
// listing ctrl, else the v2 line ("0::/path").
func cgroupLine(text, ctrl string) string {
	unified := ""
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			if c == ctrl {
				return f[2]
			}
		}
		if f[0] == "0" && f[1] == "" {
			unified = f[2]
		}
	}
	return unified
}

// groupDir is the directory of group path p in ctrl's hierarchy.
func groupDir(ctrl, p string) string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return filepath.Join("/sys/fs/cgroup", p) // unified
	}
	return filepath.Join("/sys/fs/cgroup", ctrl, p)
}

func groupExists(ctrl, p string) bool {
	st, err := os.Stat(groupDir(ctrl, p))
	return err == nil && st.IsDir()
}

// The interpreter's code is on huge pages in a fork-mode zygote when half of
// zygote_memory_mib leaves room for it (agents/python/zygo_agent/hugetext.py),
// and not when the sandbox already holds half: the zygote itself, or a helper
// its import started. A sparse table is never collapsed (it would become
// memory), and `zygo serve --no-huge-pages` turns it all off. A request's
// child sees what its zygote has: read-only anonymous mappings on huge pages,
// and the anonymous memory it maps.
func TestInterpreterCodeOnHugePagesWithinTheZygoteLimit(t *testing.T) {
	if _, err := os.Stat("/sys/kernel/mm/transparent_hugepage"); err != nil {
		t.Skip("this kernel has no transparent huge pages (CONFIG_TRANSPARENT_HUGEPAGE): nothing to move code onto")
	}
	const handler = `
import os, time
HELD = bytearray(int(os.environ.get("HOLD_MIB", "0")) << 20)
for i in range(0, len(HELD), 4096):
    HELD[i] = 1
if os.environ.get("HELPER_MIB") and os.fork() == 0:
    more = bytearray(int(os.environ["HELPER_MIB"]) << 20)
    for i in range(0, len(more), 4096):
        more[i] = 1
    open("/tmp/helper-ready", "w").close()
    time.sleep(600)
    os._exit(0)
while os.environ.get("HELPER_MIB") and not os.path.exists("/tmp/helper-ready"):
    time.sleep(0.01)
if os.environ.get("SPARSE_MIB"):  # private, untouched until written, as np.zeros's calloc
    import mmap
    SPARSE = mmap.mmap(-1, int(os.environ["SPARSE_MIB"]) << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    for i in range(0, len(SPARSE), 1 << 21):
        SPARSE[i] = 1
    if os.environ.get("SPARSE_READ") != "0":  # read whole: the untouched pages now map the
        # zero page (or, on a kernel that gives each page read one of its own, are memory)
        COUNT = SPARSE[:].count(1)

def handler(event, ctx):
    kib, current = 0, None
    with open("/proc/self/smaps") as f:
        for line in f:
            fields = line.split()
            if "-" in fields[0] and not fields[0].endswith(":"):
                current = fields[1] == "r-xp" and len(fields) == 5  # no path: anonymous
            elif fields[0] == "AnonHugePages:" and current:
                kib += int(fields[1])
    with open("/proc/self/status") as f:
        anon = [int(l.split()[1]) for l in f if l.startswith("RssAnon:")][0]
    return {"code_kib": kib, "anon_kib": anon}
`
	type result struct {
		CodeKiB int `json:"code_kib"`
		AnonKiB int `json:"anon_kib"`
	}
	cases := []struct {
		name, extra string
		want        bool
	}{
		{"hugedefault", "", true},
		// 40 MiB held and the interpreter's own: more than half of 96 MiB.
		{"hugetight", "[limits]\nzygote_memory_mib = 96\n[env]\nHOLD_MIB = \"40\"\n", false},
		// A helper holding 40 MiB, the zygote little: the sandbox holds more than half.
		{"hugehelper", "[limits]\nzygote_memory_mib = 96\n[env]\nHELPER_MIB = \"40\"\n", false},
		// 256 MiB of anonymous memory with one page written every 2 MiB, then read whole.
		{"hugesparse", sparseEnv, true},
		// The same, never read: sparse on every kernel.
		{"hugesparsew", sparseWrittenEnv, true},
	}
	deploy := func(d *Daemon, name, extra string) result {
		dir := writeFunction(t, map[string]string{
			"zygo.toml": "name = \"" + name + "\"\nruntime = \"python\"\nhandler = \"main:handler\"\n" + extra,
			"main.py":   handler,
		})
		d.Up(dir)
		var r result
		for range 3 {
			d.Invoke(name, map[string]any{}, &r) // the zygote keeps serving
		}
		return r
	}
	d := startDaemon(t, "")
	sparse := map[string]result{}
	for _, c := range cases {
		r := deploy(d, c.name, c.extra)
		if got := r.CodeKiB >= 2048; got != c.want {
			t.Errorf("%s: %d KiB of read-only anonymous code on huge pages in a request's child; want some: %v", c.name, r.CodeKiB, c.want)
		}
		if strings.HasPrefix(c.name, "hugesparse") {
			sparse[c.name] = r
		}
	}
	off := startDaemonArgs(t, "--no-huge-pages")
	if r := deploy(off, "hugeoff", ""); r.CodeKiB != 0 {
		t.Errorf("zygo serve --no-huge-pages: %d KiB of code on huge pages in a request's child", r.CodeKiB)
	}
	// The same sparse tables without huge pages: what the function holds by itself (the
	// read one about 256 MiB more where the kernel gives every page read a page of its own).
	// Huge pages may add the interpreter's code and a few dense heap ranges, never a table.
	for name, env := range map[string]string{"hugesparse": sparseEnv, "hugesparsew": sparseWrittenEnv} {
		base := deploy(off, name, env)
		if got := sparse[name]; got.AnonKiB > base.AnonKiB+32<<10 {
			t.Errorf("%s: a request's child maps %d KiB of anonymous memory, %d KiB without huge pages: the sparse table was filled", name, got.AnonKiB, base.AnonKiB)
		}
	}
}

// The sparse tables of TestInterpreterCodeOnHugePagesWithinTheZygoteLimit: 256 MiB, one
// page written every 2 MiB, read whole or not at all.
const (
	sparseEnv        = "[env]\nSPARSE_MIB = \"256\"\n"
	sparseWrittenEnv = "[env]\nSPARSE_MIB = \"256\"\nSPARSE_READ = \"0\"\n"
)
