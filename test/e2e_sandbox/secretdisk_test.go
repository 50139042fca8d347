package e2esandbox

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// memoryFS reports whether path is on a tmpfs or ramfs.
func memoryFS(path string) bool {
	var s unix.Statfs_t
	if unix.Statfs(path, &s) != nil {
		return false
	}
	return s.Type == unix.TMPFS_MAGIC || s.Type == unix.RAMFS_MAGIC
}

// filesHolding walks each root and returns every regular file on a filesystem other than
// tmpfs or ramfs that contains value.
func filesHolding(value string, roots ...string) []string {
	var found []string
	seen := map[string]bool{} // one root may be inside another
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return nil // gone meanwhile, or another tool's private dir
			}
			if e.IsDir() && memoryFS(p) {
				return filepath.SkipDir
			}
			if !e.Type().IsRegular() || seen[p] {
				return nil
			}
			seen[p] = true
			if info, err := e.Info(); err != nil || info.Size() > 1<<30 {
				return nil // another test's huge sparse file; an image of these sandboxes is far smaller
			}
			if fileHolds(p, []byte(value)) {
				found = append(found, p)
			}
			return nil
		})
	}
	return found
}

// fileHolds reports whether the file at p contains value. It reads in chunks: reading whole
// images would grow this process, and a child started after that reports the parent's peak
// as its own maximum RSS (TestExecStdinStreams measures one).
func fileHolds(p string, value []byte) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	buf := make([]byte, 1<<20+len(value))
	kept := 0 // bytes carried over from the previous chunk
	for {
		n, err := io.ReadFull(f, buf[kept:])
		if bytes.Contains(buf[:kept+n], value) {
			return true
		}
		if err != nil {
			return false
		}
		kept = copy(buf, buf[kept+n-(len(value)-1):kept+n])
	}
}

// A sandbox's secret never reaches a disk: not while it runs, nor in its checkpoint image
// (its memory), nor in its fork children, their rollback, or anything runsc, the guest's host
// dir or the daemon keep. After each step every file under the state dir (runsc's root and
// the instances included) and the host's /tmp that is not on a tmpfs or ramfs is read, and
// none may hold the value. The image of a sandbox with secrets is in STATE/images-mem, a
// tmpfs; one without stays in STATE/images. The images survive a daemon restart; when the
// tmpfs is gone (as after a reboot) the daemon starts, shows the checkpoint as lost, refuses
// to fork from it, and removes it.
func TestSandboxSecretsNeverOnDisk(t *testing.T) {
	d := startDaemon(t)
	if memoryFS(d.StateDir) {
		t.Fatalf("the state dir %s is on a tmpfs: this test needs it on a disk filesystem", d.StateDir)
	}
	value := "never-on-disk-" + randomHex(t) + randomHex(t)
	if _, errOut, code := d.CLIIn(value+"\n", "secret", "set", "API_KEY"); code != 0 {
		t.Fatalf("secret set: %s", errOut)
	}
	check := func(step string) {
		t.Helper()
		if found := filesHolding(value, d.StateDir, os.TempDir()); len(found) > 0 {
			t.Errorf("after %s the secret's value is in files on a disk filesystem: %v", step, found)
		}
	}
	src := d.OK("sandbox", "create", "--name", "sec", "--secret", "API_KEY")
	if got := d.OK("sandbox", "exec", src, "--", "cat", "/run/secrets/API_KEY"); got != value {
		t.Fatalf("the sandbox reads %q", got)
	}
	// The value in the sandbox's own files and processes too: all of it is in its memory.
	d.OK("sandbox", "exec", src, "--", "sh", "-c", "cp /run/secrets/API_KEY /root/copy; echo \"$(cat /run/secrets/API_KEY)\" >/tmp/copy")
	check("create")
	cp := d.OK("sandbox", "checkpoint", src, "--tag", "base")
	check("checkpoint")
	plain := d.OK("sandbox", "create", "--name", "plain")
	plainCP := d.OK("sandbox", "checkpoint", plain)
	dirs := checkpointDirs(t, d)
	if dir := dirs[cp]; filepath.Dir(dir) != filepath.Join(d.StateDir, "images-mem") || !memoryFS(dir) {
		t.Errorf("the image of the sandbox with a secret is at %q (memory: %v), want it in STATE/images-mem on a tmpfs", dir, memoryFS(dir))
	}
	if dir := dirs[plainCP]; filepath.Dir(dir) != filepath.Join(d.StateDir, "images") {
		t.Errorf("the image of the sandbox without secrets is at %q, want it in STATE/images", dir)
	}
	kids := lines(d.OK("sandbox", "fork", src, "-n", "2", "--from", "base"))
	if len(kids) != 2 {
		t.Fatalf("fork -n 2 printed %q", kids)
	}
	check("fork")
	for _, k := range kids {
		if got := d.OK("sandbox", "exec", k, "--", "cat", "/root/copy"); got != value {
			t.Errorf("child %s reads %q", k, got)
		}
	}
	grandCP := d.OK("sandbox", "checkpoint", kids[0])
	check("checkpoint of a child")
	d.OK("sandbox", "rollback", src, "--to", "base")
	check("rollback")

	d.Stop()
	d.Start()
	waitRecovered(t, d)
	d.OK("sandbox", "rollback", kids[1], "--to", "base") // the in-memory image survived the restart
	check("rollback after a daemon restart")

	// A reboot loses the images in memory; the records stay, marked lost.
	for _, id := range []string{src, plain, kids[1]} {
		d.OK("sandbox", "rm", id)
	}
	d.Stop()
	if err := unix.Unmount(filepath.Join(d.StateDir, "images-mem"), unix.MNT_DETACH); err != nil {
		t.Fatalf("unmounting the images' tmpfs: %v", err)
	}
	d.Start()
	waitRecovered(t, d)
	cps, err := d.Client.Checkpoints(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	lost := map[string]bool{}
	for _, c := range cps {
		lost[c.ID] = c.Lost
	}
	if !lost[cp] || !lost[grandCP] || lost[plainCP] {
		t.Errorf("lost after the tmpfs went: %v; want %s and %s lost, %s not", lost, cp, grandCP, plainCP)
	}
	for _, args := range [][]string{{"fork", kids[0], "--from", cp}, {"rollback", kids[0], "--to", cp}} {
		if msg := d.Fails(append([]string{"sandbox"}, args...)...); !strings.Contains(msg, "is lost") {
			t.Errorf("%s from a lost checkpoint: %q, want it to say the checkpoint is lost", args[0], msg)
		}
	}
	d.OK("sandbox", "rm", kids[0])
	if !strings.Contains(d.Log(), "checkpoint image lost") {
		t.Errorf("the daemon did not log the lost checkpoints")
	}
	d.OK("sandbox", "checkpoints", "rm", grandCP)
	d.OK("sandbox", "checkpoints", "rm", cp)
	check("the end")
}

// checkpointDirs maps each checkpoint's id to its image dir, found on the daemon's host (the
// API does not tell a caller host paths): STATE/images-mem/ID or STATE/images/ID.
func checkpointDirs(t *testing.T, d *Daemon) map[string]string {
	t.Helper()
	cps, err := d.Client.Checkpoints(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, c := range cps {
		for _, root := range []string{"images-mem", "images"} {
			if dir := filepath.Join(d.StateDir, root, c.ID); dirExists(dir) {
				out[c.ID] = dir
				break
			}
		}
	}
	return out
}

func dirExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// waitRecovered waits until the daemon (since its last start) reports its recovery done.
func waitRecovered(t *testing.T, d *Daemon) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(d.Log(), "sandboxes recovered"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not report recovery:\n%s", tail(d.Log(), 20))
		}
	}
}
