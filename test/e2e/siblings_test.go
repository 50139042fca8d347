package e2e

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
)

// TestRequestCannotReachAnotherRequestsDirectory: every request directory of a
// zygote sits beside the others in /run/zygo/req and belongs to the one uid all
// its requests run as, and its 128-bit name leaks to the other requests (a unix
// socket bound in TMPDIR is listed in /proc/net/unix, as multiprocessing's
// managers do). Knowing the name must still give a request nothing of another:
// not its event, output or temp files, not a file made, planted or removed
// there, not a forged result.json, not a listing, not its directory's mode,
// times or xattrs changed (the directory is the daemon's). The attacker asserts it found the
// victim's name first, so the test fails if the leak it relies on is gone
// rather than passing without trying; the victim checks its directory is as it
// left it and answers itself.
func TestRequestCannotReachAnotherRequestsDirectory(t *testing.T) {
	requireTools(t)
	d := startDaemon(t, "")
	dir := writeFunction(t, map[string]string{
		"zygo.toml": "name = \"sib\"\nruntime = \"python\"\nhandler = \"main:handler\"\nconcurrency = 4\n",
		"main.py": `
import errno, os, re, socket, time

def _try(fn):
    try:
        fn()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))

def _make(path):
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))

def handler(event, context):
    tmp = os.environ["TMPDIR"]
    mine = os.path.dirname(tmp)
    if event.get("victim"):
        with open(os.path.join(tmp, "private.txt"), "w") as f:
            f.write("VICTIM-PRIVATE")
        print("victim stdout: " + event["card"])
        s = socket.socket(socket.AF_UNIX)
        s.bind(os.path.join(tmp, "ipc.sock"))
        s.listen()
        open("/tmp/victim-ready-%s" % event["round"], "w").close()
        deadline = time.monotonic() + 20
        while not os.path.exists("/tmp/attacker-done-%s" % event["round"]) and time.monotonic() < deadline:
            time.sleep(0.02)
        seen = [n for n in ("event.json", "stdout", "stderr", "tmp", "planted", "d")
                if os.path.lexists(os.path.join(mine, n))]
        return {"victim": seen + sorted(os.listdir(tmp)), "mode": oct(os.stat(mine).st_mode & 0o7777)}
    deadline = time.monotonic() + 20
    while not os.path.exists("/tmp/victim-ready-%s" % event["round"]) and time.monotonic() < deadline:
        time.sleep(0.02)
    names = set(re.findall(r"(/run/zygo/req/[0-9a-f]{32})/", open("/proc/net/unix").read())) - {mine}
    out = {"found": len(names)}
    for d in names:
        staged = os.path.join(tmp, "forged")
        with open(staged, "w") as f:
            f.write('{"ok": true, "value": "forged"}')
        out.update({
            "event": _try(lambda: open(d + "/event.json").read()),
            "stdout": _try(lambda: open(d + "/stdout").read()),
            "private": _try(lambda: open(d + "/tmp/private.txt").read()),
            "via_root": _try(lambda: open("/proc/self/root" + d + "/event.json").read()),
            "plant": _try(lambda: _make(d + "/tmp/planted")),
            "fifo": _try(lambda: os.mkfifo(d + "/result.json")),
            "forge": _try(lambda: os.rename(staged, d + "/result.json")),
            "remove": _try(lambda: os.unlink(d + "/event.json")),
            "list": _try(lambda: os.listdir(d)),
            "chmod": _try(lambda: os.chmod(d, 0o500)),
            "utime": _try(lambda: os.utime(d, (0, 0))),
            "xattr": _try(lambda: os.setxattr(d, "user.zygo", b"x")),
        })
    open("/tmp/attacker-done-%s" % event["round"], "w").close()
    return out
`,
	})
	d.Up(dir)
	// Twice: a victim event small enough to travel in go (no event.json: its name is not
	// there to open or remove), and one padded past 32 KiB (docs/protocol.md, step 4), so
	// that it is a file of the victim's directory, as a large event is.
	for _, c := range []struct {
		round, eventErr, files string
		pad                    int
	}{{"inline", "ENOENT", "", 0}, {"file", "EACCES", "event.json ", 40 << 10}} {
		var wg sync.WaitGroup
		var victim struct {
			Victim []string `json:"victim"`
			Mode   string   `json:"mode"`
		}
		var victimErr error
		wg.Add(1)
		go func() { // TryInvoke: t.Fatal belongs to the test's goroutine
			defer wg.Done()
			res, err := d.TryInvoke("sib", map[string]any{"victim": true, "card": "4111-1111", "round": c.round, "pad": strings.Repeat("p", c.pad)})
			if err == nil {
				err = json.Unmarshal(res.Value, &victim)
			}
			victimErr = err
		}()
		var attack map[string]any
		d.Invoke("sib", map[string]any{"round": c.round}, &attack)
		wg.Wait()
		if victimErr != nil {
			t.Errorf("%s: the victim's own answer: %v", c.round, victimErr)
		}
		if attack["found"] != float64(1) {
			t.Fatalf("%s: the attacker found %v request directories of others in /proc/net/unix, want the victim's: %v", c.round, attack["found"], attack)
		}
		var reached []string
		for k, want := range map[string]string{"event": c.eventErr, "stdout": "EACCES", "private": "EACCES",
			"via_root": c.eventErr, "plant": "EACCES", "fifo": "EACCES", "forge": "EACCES", "remove": c.eventErr,
			// The directory is the daemon's (01733): not listable, and its mode, times and
			// xattrs are not the sandbox uid's to change (no Landlock right covers those).
			"list": "EACCES", "chmod": "EPERM", "utime": "EPERM", "xattr": "EPERM"} {
			if got := fmt.Sprint(attack[k]); got != want {
				reached = append(reached, k+"="+got+" (want "+want+")")
			}
		}
		sort.Strings(reached)
		if len(reached) > 0 {
			t.Errorf("%s: a request reached a concurrent request's directory by its name: %s", c.round, strings.Join(reached, "; "))
		}
		// The victim's own directory holds what the supervisor and the victim put there, and
		// nothing else.
		if got, want := strings.Join(victim.Victim, " "), c.files+"stdout stderr tmp ipc.sock private.txt"; got != want {
			t.Errorf("%s: the victim's directory and TMPDIR hold %q, want %q", c.round, got, want)
		}
		if victim.Mode != "0o1733" {
			t.Errorf("%s: the victim's directory has mode %s, want 0o1733", c.round, victim.Mode)
		}
	}
}
