package agentproc

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// TestRequestDirErrorNamesTheCause: a request directory that cannot be
// made is ErrUnavailable (503) naming the cause, without the host path the
// underlying error carries.
func TestRequestDirErrorNamesTheCause(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{unix.ENOSPC, "request tmpfs (--run-tmpfs-mib) is full"},
		{unix.EDQUOT, "request tmpfs (--run-tmpfs-mib) is full"},
		{unix.EMFILE, "out of file descriptors"},
		{unix.ENFILE, "out of file descriptors"},
		{unix.EIO, "making the request directory failed"},
	} {
		err := requestDirError(fmt.Errorf("creating request tmp: mkdirat /state/run/z1/req/tok/tmp: %w", c.err))
		if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "/state") {
			t.Errorf("%v: got %q, want ErrUnavailable saying %q and no host path", c.err, err, c.want)
		}
	}
}

// TestChildStepsAreBoundedTokens: the child's timing in result.json becomes
// child.NAME phases only for well-formed [name, ns] pairs whose name is one the agent
// times, each name once (its last report); anything else is dropped without failing the
// request, so a handler appending to the list can neither invent phases nor push the
// agent's own out.
func TestChildStepsAreBoundedTokens(t *testing.T) {
	body := `{"ok": true, "value": 1, "steps": [["reseed", 1500], ["bad name", 1], ["x\r\nSet-Cookie", 1], [3, 4], ["neg", -1], "junk", ["db", 7], ["reseed", 1.5e3], ["re\"seed", 1], [ "stdio" , 1e3 ], ["handler", 9], ["handler", 2000000], [["handler"], 5], {"handler": 5}, null, ["handler", 7, 8]]}`
	rf, err := decodeResult([]byte(body))
	if err != nil {
		t.Fatalf("a result with odd steps must still decode: %v", err)
	}
	got := rf.Steps.phases()
	want := []Phase{{"child.reseed", 1500 * time.Nanosecond}, {"child.handler", 2 * time.Millisecond}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("phases %v, want %v", got, want)
	}
	many := strings.Repeat(`["pre.reseed", 1],`, 100)
	if rf, err = decodeResult([]byte(`{"ok": true, "steps": [` + many + `["encode", 5]]}`)); err != nil {
		t.Fatal(err)
	}
	if got := rf.Steps.phases(); len(got) != 2 || got[1].Name != "child.encode" {
		t.Errorf("phases from 100 copies of one step and encode: %v, want one of each", got)
	}
	// Every known name, and more reports than fit: the first maxChildSteps names are kept.
	var all []string
	for name := range childSteps {
		all = append(all, `["`+name+`", 1]`)
	}
	if rf, err = decodeResult([]byte(`{"ok": true, "steps": [` + strings.Join(all, ",") + `, ["handler", 9]]}`)); err != nil {
		t.Fatal(err)
	}
	if got := rf.Steps.phases(); len(got) != min(len(childSteps), maxChildSteps) {
		t.Errorf("%d phases from %d known names, want %d", len(got), len(childSteps), min(len(childSteps), maxChildSteps))
	}
	for _, body := range []string{`{"ok": true, "steps": null}`, `{"ok": true, "steps": []}`, `{"ok": true, "steps": [ ]}`, `{"ok": true}`,
		`{"ok": true, "steps": [["handler", 5]], "steps": null}`} {
		if rf, err := decodeResult([]byte(body)); err != nil || len(rf.Steps.phases()) != 0 {
			t.Errorf("%s: %v, %v; want no steps and no error", body, rf, err)
		}
	}
	// A "steps" that is not a list fails the result, as it did when it was decoded as one.
	for _, body := range []string{`{"ok": true, "steps": 5}`, `{"ok": true, "steps": "x"}`, `{"ok": true, "steps": {}}`,
		`{"ok": true, "steps": true}`, `{"ok": true, "steps": [], "steps": {"a": 1}}`} {
		if _, err := decodeResult([]byte(body)); err == nil {
			t.Errorf("%s: decoded, want an error", body)
		}
	}
}

// TestChildStepNamesAreTokens: every name passed on is a short token fit for a
// Server-Timing metric name, and its phase is child.NAME.
func TestChildStepNamesAreTokens(t *testing.T) {
	token := regexp.MustCompile(`^[a-z0-9_+.-]{1,32}$`)
	for name, phase := range childSteps {
		if !token.MatchString(name) || phase != "child."+name {
			t.Errorf("step %q (phase %q): want a token of [a-z0-9_+.-], 1 to 32 bytes, as child.NAME", name, phase)
		}
	}
}

// TestChildStepsNameEveryAgentStep: every step name the Python agent times (its _lap calls
// and _STEP_TOKENS) is one childPhases passes on, so a renamed or new step is not dropped
// silently.
func TestChildStepsNameEveryAgentStep(t *testing.T) {
	var src []byte
	for _, f := range []string{"child.py", "pool.py"} {
		b, err := os.ReadFile("../../agents/python/zygo_agent/" + f)
		if err != nil {
			t.Fatal(err)
		}
		src = append(src, b...)
	}
	// _lap("NAME"), and the steps of _prepare, timed as _lap(step) after step = "NAME".
	names := regexp.MustCompile(`_lap\("([^"]+)"\)|\bstep = "([a-z_+.]+)"`).FindAllStringSubmatch(string(src), -1)
	if len(names) < 8 {
		t.Fatalf("found %d step names in child.py; the pattern no longer matches the agent", len(names))
	}
	for _, m := range names {
		name := m[1] + m[2]
		if _, ok := childSteps[name]; !ok {
			t.Errorf("the agent times step %q, which childSteps drops", name)
		}
	}
}
