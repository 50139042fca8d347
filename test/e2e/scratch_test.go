package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zygo-run/zygo/sdk/go/zygo"
	"github.com/zygo-run/zygo/test/e2eutil"
	"golang.org/x/sys/unix"
)

// scratchTmpfsMiB is the --run-tmpfs-mib of TestScratchIsBounded's daemon:
// small, so that filling a tmpfs is quick.
const scratchTmpfsMiB = 8

// startDaemonArgs is startDaemon on a new state dir with extra serve flags.
func startDaemonArgs(t *testing.T, args ...string) *Daemon {
	t.Helper()
	requireTools(t)
	stateDir, err := os.MkdirTemp("", "zygo-e2e-state-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(stateDir) })
	d := &Daemon{t: t, Process: &e2eutil.Process{T: t, Bin: zygoBin, StateDir: stateDir, Args: args}}
	d.Start(20 * time.Second)
	t.Cleanup(d.Stop)
	return d
}

type mountsReport struct {
	Mounts []struct {
		Point  string `json:"point"`
		Opts   string `json:"opts"`
		FSType string `json:"fstype"`
		Super  string `json:"super"`
		Dir    bool   `json:"dir"`
	} `json:"mounts"`
	DevWrite string `json:"dev_write"`
}

type fillReport struct {
	Steps [][]any `json:"steps"` // [what, how many, errno]
}

// TestScratchIsBounded (issue 12: what a request can fill and keep). Every
// writable mount of the sandbox is either without storage (proc, devpts) or
// a tmpfs with a size and inode cap: /dev is read-only (bwrap's own /dev
// tmpfs has no cap), /dev/shm and /tmp are --run-tmpfs-mib each, and POSIX
// shared memory and semaphores still work. A request that fills /dev/shm or
// /tmp to the last inode and byte, and keeps it, costs the next requests
// nothing (they have a tmpfs of their own for their request files), and the
// function stays honestly ready. A request that fills the request tmpfs
// itself (its TMPDIR) while it runs makes a concurrent request fail with
// 503 naming the cause, not "crashed", and the next one succeeds once it
// has ended.
func TestScratchIsBounded(t *testing.T) {
	d := startDaemonArgs(t, "--run-tmpfs-mib", "8")
	d.Up(fixture("scratch"))

	var m mountsReport
	d.Invoke("scratch", map[string]any{"action": "mounts"}, &m)
	sawShm := false
	for _, mt := range m.Mounts {
		if !strings.HasPrefix(mt.Opts, "rw") {
			continue
		}
		switch {
		case mt.FSType == "proc" || mt.FSType == "devpts":
			// No storage behind them.
		case mt.FSType == "devtmpfs" && !mt.Dir && strings.HasPrefix(mt.Point, "/dev/"):
			// bwrap's binds of single device nodes (/dev/null, /dev/zero, ...):
			// nothing can be created through them.
		case mt.FSType == "tmpfs" && strings.Contains(mt.Super, "size=") && strings.Contains(mt.Super, "nr_inodes="):
			sawShm = sawShm || mt.Point == "/dev/shm"
		default:
			t.Errorf("writable mount %s (%s, %s) has no size and inode cap", mt.Point, mt.FSType, mt.Super)
		}
	}
	if !sawShm {
		t.Errorf("no capped writable tmpfs at /dev/shm among %+v", m.Mounts)
	}
	if m.DevWrite != "EROFS" {
		t.Errorf("creating a file in /dev: %s, want EROFS", m.DevWrite)
	}
	for _, p := range []string{"/dev/shm", "/tmp"} {
		var st struct {
			SizeMiB int `json:"size_mib"`
		}
		d.Invoke("scratch", map[string]any{"action": "statvfs", "path": p}, &st)
		if st.SizeMiB != scratchTmpfsMiB {
			t.Errorf("%s is %d MiB, want --run-tmpfs-mib %d", p, st.SizeMiB, scratchTmpfsMiB)
		}
	}
	var shm struct {
		ReadBack  string `json:"read_back"`
		Semaphore string `json:"semaphore"`
	}
	d.Invoke("scratch", map[string]any{"action": "shm"}, &shm)
	if shm.ReadBack != "hello" || shm.Semaphore != "ok" {
		t.Errorf("POSIX shared memory and semaphores in the sandbox: %+v", shm)
	}

	for _, p := range []string{"/dev/shm", "/tmp"} {
		var f fillReport
		d.Invoke("scratch", map[string]any{"action": "fill", "path": p}, &f)
		if len(f.Steps) != 2 || f.Steps[0][2] != "ENOSPC" || f.Steps[1][2] != "ENOSPC" {
			t.Errorf("filling %s: %v, want mkdir then write to end with ENOSPC", p, f.Steps)
		}
		for i := range 3 {
			if _, err := d.TryInvoke("scratch", map[string]any{}); err != nil {
				t.Errorf("request %d after %s was filled: %v", i, p, err)
			}
		}
	}
	checkReady(t, d, "scratch")
	checkRequestTmpfsFull(t, d)
	checkReady(t, d, "scratch")
}

// checkRequestTmpfsFull: while one request holds every inode of the
// request tmpfs (its TMPDIR), another gets 503 naming the cause; after it
// ends, requests succeed again. The 503 comes from the supervisor's write of
// event.json, or, when the pool's refill freed one inode after the holder
// filled the rest (a directory made ahead that found no room for its tmp/),
// from the child that then found no room for its own files (Run: no result
// and the tmpfs full). The holder keeps taking inodes freed after its fill,
// and the request is sent once the host has seen none free for 200 ms.
func checkRequestTmpfsFull(t *testing.T, d *Daemon) {
	// The directories of the requests before are removed after their answers: one removed
	// after the holder filled the tmpfs would give the next request room. Wait until every
	// request directory left is one made ahead for the pool (tmp/ alone, empty).
	var left []string
	for range 200 {
		left = nil
		dirs, _ := filepath.Glob(filepath.Join(d.StateDir, "run", "*", "req", "*"))
		for _, dir := range dirs {
			names, _ := filepath.Glob(filepath.Join(dir, "*"))
			inTmp, _ := filepath.Glob(filepath.Join(dir, "tmp", "*"))
			if len(names) != 1 || filepath.Base(names[0]) != "tmp" || len(inTmp) != 0 {
				left = append(left, dir)
			}
		}
		if len(left) == 0 {
			break
		}
		time.Sleep(25 * time.Millisecond)
	}
	if len(left) != 0 {
		t.Fatalf("request directories of ended requests still there after 5 s: %v", left)
	}
	held := make(chan error, 1)
	go func() {
		_, err := d.TryInvoke("scratch", map[string]any{"action": "hold_full"})
		held <- err
	}()
	var filled []string
	for range 400 { // the holder says so in /tmp, seen from the host
		filled, _ = filepath.Glob(filepath.Join(d.StateDir, "run", "*", "scratch", "tmp", "filled"))
		if len(filled) == 1 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(filled) != 1 {
		t.Fatalf("the holding request did not fill the request tmpfs: %v", <-held)
	}
	// A directory whose removal was under way during the fill frees inodes after it (a
	// kernel that lists a directory newest first leaves tmp/ for last, which looks like a
	// directory made ahead); the holder takes each one back within 10 ms. Wait until the
	// host sees no free inode on the request tmpfs for 200 ms.
	reqTmpfs := filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(filled[0]))), "req")
	var st unix.Statfs_t
	for zero, i := 0, 0; zero < 10; i++ {
		if err := unix.Statfs(reqTmpfs, &st); err != nil {
			t.Fatal(err)
		}
		if st.Ffree == 0 {
			zero++
		} else {
			zero = 0
		}
		if i == 250 {
			t.Fatalf("the request tmpfs still has %d free inodes 5 s after the holder filled it", st.Ffree)
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, err := d.TryInvoke("scratch", map[string]any{})
	var ae *zygo.Error
	if !errors.As(err, &ae) || ae.Status != 503 || ae.Code != "unavailable" || !strings.Contains(ae.Message, "request tmpfs") {
		t.Errorf("a request while the request tmpfs is full: %v (%+v), want 503 unavailable naming the request tmpfs", err, ae)
	} else if strings.Contains(ae.Message, d.StateDir) {
		t.Errorf("the 503 names a host path: %s", ae.Message)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(filled[0]), "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-held; err != nil {
		t.Errorf("the holding request: %v", err)
	}
	if _, err := d.TryInvoke("scratch", map[string]any{}); err != nil {
		t.Errorf("a request after the holder ended: %v", err)
	}
}

// checkReady: the function is listed ready with its zygote.
func checkReady(t *testing.T, d *Daemon, name string) {
	t.Helper()
	list, err := d.Client.Functions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		if s.Name == name && (s.State != "ready" || s.ZygotePID == 0) {
			t.Errorf("%s is %s (zygote %d), want ready", name, s.State, s.ZygotePID)
		}
	}
}
