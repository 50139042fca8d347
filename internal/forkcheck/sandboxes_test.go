package forkcheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestShape(t *testing.T) {
	for _, c := range []struct {
		n     int
		forks string
		words string
	}{
		{11, "[3 3 3]", "3 forks of 3, 2 rollbacks of the source"},
		{5, "[3]", "1 fork of 3, 2 rollbacks of the source"},
		{12, "[3 3 3 1]", "3 forks of 3, 1 fork of 1, 2 rollbacks of the source"},
		{4, "[2]", "1 fork of 2, 2 rollbacks of the source"},
		{2, "[]", "2 rollbacks of the source"},
	} {
		forks, rb := Shape(c.n)
		total := rb
		for _, f := range forks {
			total += f
		}
		if fmt.Sprint(forks) != c.forks || rb != 2 || total != c.n {
			t.Errorf("Shape(%d) = %v, %d; want %s, 2", c.n, forks, rb, c.forks)
		}
		if got := ShapeString(c.n); got != c.words {
			t.Errorf("ShapeString(%d) = %q, want %q", c.n, got, c.words)
		}
	}
}

func TestRoundTo(t *testing.T) {
	for _, c := range []struct{ x, step, want float64 }{
		{-0.04, 1, 0}, {0.3, 0.1, 0.3}, {10.04, 0.1, 10}, {25.16, 0.1, 25.2}, {-0.6, 1, -1},
	} {
		got := roundTo(c.x, c.step)
		b, _ := json.Marshal(got)
		wb, _ := json.Marshal(c.want)
		if string(b) != string(wb) {
			t.Errorf("roundTo(%v, %v) = %s, want %s", c.x, c.step, b, wb)
		}
	}
}

// TestSandboxRows checks what the host derives from the Python probe's report.
func TestSandboxRows(t *testing.T) {
	now := time.Now()
	wall := func(d time.Duration) float64 { return float64(now.Add(d).UnixMicro()) / 1e6 }
	suspended := int64(20 * time.Second)
	live := liveResult{
		Sandbox: map[string]json.RawMessage{
			"/run/zygo/generation":       json.RawMessage(`"g1"`),
			"sandbox id (identity.json)": json.RawMessage(`"sb-1"`),
		},
		Clock: &probeClock{
			Armed:   instant{Wall: wall(-30 * time.Second), Mono: 100},
			Trigger: instant{Wall: wall(0), Mono: 110}, // 20 s of wall time the monotonic clock did not count
			Fired:   &instant{Wall: wall(-20 * time.Second), Mono: 110.04},
			TimerS:  10, SuspendedNS: &suspended,
		},
	}
	rows, err := sandboxRows(live, CopyInfo{SandboxID: "sb-1", Generation: "other"}, now.Add(-time.Second), now.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"generation is the copy's own (the host's record)": "false",
		"sandbox id is the copy's own (the host's record)": "true",
		"wall clock agrees with the host's (±1 s)":         "true",
		RowMonotonic:                        "20",
		RowTimer:                            "10",
		"suspended_ns in identity.json (s)": "20",
	}
	for k, v := range want {
		if got := canonical(rows[k]); got != v {
			t.Errorf("row %q = %s, want %s", k, got, v)
		}
	}
	// A guest clock an hour off disagrees with the host's.
	live.Clock.Trigger.Wall = wall(time.Hour)
	rows, _ = sandboxRows(live, CopyInfo{}, now.Add(-time.Second), now.Add(time.Second))
	if got := canonical(rows["wall clock agrees with the host's (±1 s)"]); got != "false" {
		t.Errorf("an hour off: %s", got)
	}
	if _, err := sandboxRows(liveResult{}, CopyInfo{}, now, now); err == nil {
		t.Error("a report without sandbox rows was accepted")
	}
}

// TestSandboxSpecs: every probe has specs, every row says why, and every documented row says
// what the user can do (the rule: documented, never hidden, never a pass).
func TestSandboxSpecs(t *testing.T) {
	if len(SandboxProbeOrder) != len(SandboxSpecs) {
		t.Errorf("%d probes in order, %d with specs", len(SandboxProbeOrder), len(SandboxSpecs))
	}
	for _, p := range SandboxProbeOrder {
		if len(SandboxSpecs[p]) == 0 {
			t.Errorf("probe %s has no specs", p)
		}
		for name, sp := range SandboxSpecs[p] {
			if sp.Why == "" {
				t.Errorf("%s %s: no reason", p, name)
			}
			if sp.Expect == Documented && sp.Mitigation == "" {
				t.Errorf("%s %s: documented without a mitigation", p, name)
			}
		}
	}
	ctl := WithSandboxControl(SandboxSpecs)
	if _, ok := SandboxSpecs["python"][SandboxControlRow]; ok {
		t.Error("WithSandboxControl changed SandboxSpecs")
	}
	if ctl["python"][SandboxControlRow].Expect != Differs {
		t.Errorf("control row: %+v", ctl["python"][SandboxControlRow])
	}
}

func TestPrintSandboxTable(t *testing.T) {
	vals := func(vs ...string) []map[string]json.RawMessage {
		out := make([]map[string]json.RawMessage, len(vs))
		for i, v := range vs {
			out[i] = map[string]json.RawMessage{"pid": json.RawMessage(v), "urandom": json.RawMessage(v),
				"timer": json.RawMessage(fmt.Sprintf("%s.5", v)), SandboxControlRow: json.RawMessage("0.5")}
		}
		return out
	}
	specs := map[string]Spec{
		"pid":             {Expect: Documented, Why: "pids repeat", Mitigation: "use the generation"},
		"timer":           {Expect: Documented, Why: "pids repeat", Mitigation: "use the generation"},
		"urandom":         {Expect: Differs, Why: "asks the kernel"},
		SandboxControlRow: {Expect: Differs, Why: "built to fail"},
	}
	copies := vals("7", "8", "9")
	rep := &SandboxesReport{Series: []string{"result"}, Rows: Evaluate("python", specs, []Series{{"result", copies}}),
		Values: map[string]map[string][]json.RawMessage{"python": {}}}
	for row := range specs {
		for _, c := range copies {
			rep.Values["python"][row] = append(rep.Values["python"][row], c[row])
		}
	}
	var b bytes.Buffer
	PrintSandboxTable(&b, "title", rep)
	out := b.String()
	for _, want := range []string{
		"PROBE", "RESULT", "VALUE", "3 different", "7..9", "7.5..9.5",
		"FAILED: python " + SandboxControlRow,
		"documented: python pid; python timer:\n      pids repeat.\n      Mitigation: use the generation.",
		"4 rows: 1 pass, 1 fail, 2 documented, 0 missing",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "documented: python urandom") {
		t.Errorf("a passing row was listed as documented:\n%s", out)
	}
}

func TestSummarize(t *testing.T) {
	raw := func(vs ...string) []json.RawMessage {
		var out []json.RawMessage
		for _, v := range vs {
			out = append(out, json.RawMessage(v))
		}
		return out
	}
	for _, c := range []struct {
		vals []json.RawMessage
		want string
	}{
		{raw(`"answered"`, `"answered"`), "answered"},
		{raw(`"5613fd13-eb56-4121-b753-5f2dd5b259dc"`, `"5613fd13-eb56-4121-b753-5f2dd5b259dc"`), "5613fd13-eb56-4121-b…"},
		{raw(`10`, `25.2`, `10`), "10..25.2"},
		{raw(`"a"`, `"b"`), ""},
		{append(raw(`1`), nil), ""},
	} {
		if got := summarize(c.vals); got != c.want {
			t.Errorf("summarize(%s) = %q, want %q", c.vals, got, c.want)
		}
	}
}

// TestEngineNeedsRunsc: without runsc the check fails and says how to install it.
func TestEngineNeedsRunsc(t *testing.T) {
	// A static guest, so that the guest check passes and the runsc one is reached.
	exe := filepath.Join(t.TempDir(), "zygo-guest")
	build := exec.Command("go", "build", "-o", exe, "github.com/zygo-run/zygo/cmd/zygo-guest")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building zygo-guest: %v\n%s", err, out)
	}
	_, err := NewSandboxEngine(EngineConfig{GuestBinary: exe, Runsc: "/nonexistent/runsc"})
	if err == nil {
		t.Fatal("an engine without runsc was made")
	}
	if os.Geteuid() == 0 && !strings.Contains(err.Error(), "scripts/install-runsc.sh") {
		t.Errorf("error %q does not say how to install runsc", err)
	}
	if _, err := NewSandboxEngine(EngineConfig{GuestBinary: "/nonexistent/zygo-guest"}); err == nil ||
		(os.Geteuid() == 0 && !strings.Contains(err.Error(), "make build")) {
		t.Errorf("missing guest binary: %v", err)
	}
}
