package e2esandbox

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/sdk/go/wire"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// categoryPhrases are the texts of Zygo's error categories (errdefs, wire.Code.Text).
var categoryPhrases = []string{"invalid argument", "failed precondition", "not found", "already exists",
	"unavailable", "too large", "permission denied", "deadline exceeded"}

// readsOnce fails t unless msg is one sentence that names a category at most once, and not
// as a tag: never in front ("invalid argument: …"), never at the end after a colon
// ("…: invalid argument"), never twice.
func readsOnce(t *testing.T, what, msg string) {
	t.Helper()
	for _, p := range categoryPhrases {
		if strings.HasSuffix(msg, ": "+p) || strings.HasPrefix(msg, p+": ") || strings.Contains(msg, ": "+p+": ") ||
			strings.Count(msg, p) > 1 {
			t.Errorf("%s: %q names the category %q as a tag or twice", what, msg, p)
		}
	}
}

// TestErrorMessagesReadOnce walks real failures through the CLI and the API: each message is
// one readable sentence (the category at most once, only as its predicate: `function "nope"
// not found`, `a sandbox named "agent" already exists`), the CLI prints what the server sent,
// sandbox create names its flags (--network, not network.mode), and what the daemon refuses
// of a deploy or an event is a 400 naming the key or the nesting depth.
func TestErrorMessagesReadOnce(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	dir := t.TempDir()
	fn := func(name, toml string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "main.py"), []byte("def handler(event, ctx):\n    return event\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "zygo.toml"), []byte(toml), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	py := func(name, extra string) string {
		return fn(name, "name = \""+name+"\"\nruntime = \"python\"\nhandler = \"main:handler\"\n"+extra)
	}
	deep := filepath.Join(dir, "deep.json")
	if err := os.WriteFile(deep, []byte(strings.Repeat("[", 100000)+strings.Repeat("]", 100000)), 0o644); err != nil {
		t.Fatal(err)
	}
	d.OK("up", py("hello", ""))
	if _, errOut, code := d.CLIIn("v\n", "secret", "set", "API_KEY"); code != 0 {
		t.Fatalf("secret set: %s", errOut)
	}
	d.OK("up", py("uses", "secrets = [\"API_KEY\"]\n"))
	sb := d.OK("sandbox", "create", "--name", "agent")
	_, forked, code := d.CLI("sandbox", "fork", sb, "-n", "1") // "forked agent from cp-…" on stderr
	cp := regexp.MustCompile(`cp-[0-9a-f]+`).FindString(forked)
	if code != 0 || cp == "" {
		t.Fatalf("fork: exit %d, no checkpoint in %q", code, forked)
	}

	for _, c := range []struct {
		stdin string
		args  []string
		want  string // the whole message after "zygo: ", or with a leading "~" a part of it
	}{
		{"", []string{"invoke", "nope"}, `function "nope" not found`},
		{"", []string{"invoke", "hello", "--data", "{bad"}, "event: is not valid JSON"},
		{"", []string{"invoke", "hello", "--data", "@" + deep}, "~EventRejected: event: nests 100000 levels deep (arrays and objects inside one another): at most 10000"},
		{"", []string{"up", fn("dup", "name = \"a\"\nname = \"b\"\n")}, "~Key 'name' has already been defined"},
		{"", []string{"up", py("nosecret", "secrets = [\"NOPE\"]\n")}, "~(set it with `zygo secret set NOPE`)"},
		{"", []string{"up", py("shell", "interpreter = \"/bin/sh\"\n")}, `~zygo.toml: interpreter: "/bin/sh" did not start Zygo's python agent (is it a python interpreter?)`},
		{"x\n", []string{"secret", "set", "bad-name"}, `~secret name "bad-name" must match`},
		{"", []string{"secret", "rm", "API_KEY"}, "~first"},
		{"", []string{"sandbox", "fork", sb, "-n", "17"}, "n: 17: must be between 1 and 16"},
		{"", []string{"sandbox", "files", "get", sb, "/nonexist"}, "guest: open /nonexist: no such file or directory"},
		{"", []string{"sandbox", "create", "--name", "agent"}, `a sandbox named "agent" already exists`},
		{"", []string{"sandbox", "create", "--network", "bogus"}, `~--network: "bogus": want "none" or "egress"`},
		{"", []string{"sandbox", "create", "--pids", "1"}, "~--pids 1: must be from"},
		{"", []string{"sandbox", "checkpoints", "rm", cp}, "~is still referenced by"},
		{"", []string{"sandbox", "exec", "nosuch", "--", "true"}, `sandbox "nosuch" not found`},
	} {
		what := strings.Join(c.args, " ")
		_, errOut, code := d.CLIIn(c.stdin, c.args...)
		// The first line of zygo's own; a deploy's step lines ("NAME: importing …") come first.
		line := errOut
		if i := strings.Index(errOut, "zygo: "); i >= 0 && (i == 0 || errOut[i-1] == '\n') {
			line = errOut[i:]
		}
		line, _, _ = strings.Cut(line, "\n")
		msg, ok := strings.CutPrefix(line, "zygo: ")
		switch {
		case code == 0 || !ok:
			t.Errorf("%s: exit %d, stderr %q; want a failure saying zygo: …", what, code, errOut)
			continue
		case strings.HasPrefix(c.want, "~") && !strings.Contains(msg, c.want[1:]):
			t.Errorf("%s: %q, want it to contain %q", what, msg, c.want[1:])
		case !strings.HasPrefix(c.want, "~") && msg != c.want:
			t.Errorf("%s: %q, want %q", what, msg, c.want)
		}
		readsOnce(t, what, msg)
	}

	// The API sends the same sentences, with the code beside them; the client's text is the
	// message as sent.
	_, err := d.Client.Fork(ctx, sb, 17, "", nil)
	apiMessage(t, err, http.StatusBadRequest, "n: 17: must be between 1 and 16")
	_, err = d.Client.CreateSandbox(ctx, wire.CreateSandboxBody{Name: "agent"})
	apiMessage(t, err, http.StatusConflict, `a sandbox named "agent" already exists`)
	_, err = d.Client.CreateSandbox(ctx, wire.CreateSandboxBody{Network: &wire.SandboxNetwork{Mode: "bogus"}})
	apiMessage(t, err, http.StatusBadRequest, `network.mode: "bogus": want "none" or "egress"`)
	err = d.Client.RemoveFunction(ctx, "nope")
	apiMessage(t, err, http.StatusNotFound, `function "nope" not found`)
}

// apiMessage fails t unless err is the daemon's answer with status and exactly message, whose
// Error() is that message and which reads once.
func apiMessage(t *testing.T, err error, status int, message string) {
	t.Helper()
	var ae *zygo.Error
	if !errors.As(err, &ae) {
		t.Fatalf("want an API error %d %q, got %v", status, message, err)
	}
	if ae.Status != status || ae.Message != message || ae.Error() != message {
		t.Errorf("API error %d %q (Error() %q), want %d %q", ae.Status, ae.Message, ae.Error(), status, message)
	}
	readsOnce(t, "API", ae.Message)
}
