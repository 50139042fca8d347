package forkcheck

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/zygo-run/zygo/internal/guest"
)

// freshProbes are the processes started in each copy after the trigger.
var freshProbes = []struct {
	probe string
	argv  []string
}{
	{"python-new", []string{sbPython, sbProbeDir + "/probe.py", "fresh"}},
	{"node-new", []string{sbNode, sbProbeDir + "/probe.js", "fresh"}},
	{"go-new", []string{sbGoProbe, "probe", "fresh"}},
}

// liveResult is what a long-lived probe (or a service) writes after the trigger.
type liveResult struct {
	Rows    map[string]json.RawMessage `json:"rows"`
	Sandbox map[string]json.RawMessage `json:"sandbox"` // the Python probe only
	Clock   *probeClock                `json:"clock"`   // the Python probe only
}

type instant struct{ Wall, Mono float64 }

// probeClock is the Python probe's clock readings: when it armed its timer (before the
// checkpoint), when it saw the trigger and when the timer fired (in the copy), and what the
// copy's identity.json says about its time as an image.
type probeClock struct {
	Armed       instant  `json:"armed"`
	Trigger     instant  `json:"trigger"`
	Fired       *instant `json:"fired"`
	TimerS      float64  `json:"timer_s"`
	SuspendedNS *int64   `json:"suspended_ns"`
}

// collect triggers the probes in copy c and records every row's value for it.
func (r *sbRun) collect(ctx context.Context, c CopyInfo) error {
	id := c.SandboxID
	before := time.Now()
	if err := r.m.PutFile(ctx, id, sbWorkDir+"/go", 0o644, strings.NewReader("")); err != nil {
		return fmt.Errorf("writing the trigger in %s: %w", id, err)
	}
	vals := map[string]map[string]json.RawMessage{}
	for _, p := range freshProbes {
		out, err := r.exec(ctx, id, p.argv...)
		if err != nil {
			return err
		}
		if vals[p.probe], err = decodeRows(out); err != nil {
			return fmt.Errorf("%s in %s: %w", p.probe, id, err)
		}
	}
	var out, errb bytes.Buffer
	res, err := r.m.RunCode(ctx, id, guest.CodeRequest{Code: interpAfter, Timeout: time.Minute}, &out, &errb)
	if err != nil {
		return fmt.Errorf("run-code in %s: %w%s", id, err, errb.String())
	}
	if !res.OK {
		return fmt.Errorf("run-code in %s: %s%s", id, res.Error, errb.String())
	}
	if vals["interpreter"], err = decodeRows(out.Bytes()); err != nil {
		return fmt.Errorf("interpreter in %s: %w", id, err)
	}
	files := map[string]string{"python": "python.json", "node": "node.json", "go": "go.json",
		"python-service": "python-service.json", "node-service": "node-service.json"}
	names := make([]string, 0, len(files))
	for _, f := range files {
		names = append(names, f)
	}
	got, err := r.wait(ctx, id, r.opts.Timer+time.Minute, names...)
	if err != nil {
		return fmt.Errorf("collecting from %s: %w", id, err)
	}
	after := time.Now()
	var live liveResult
	for probe, f := range files {
		var lr liveResult
		if err := json.Unmarshal(got[f], &lr); err != nil {
			return fmt.Errorf("decoding %s from %s: %w", f, id, err)
		}
		vals[probe] = lr.Rows
		if probe == "python" {
			live = lr
		}
	}
	if vals["sandbox"], err = sandboxRows(live, c, before, after); err != nil {
		return fmt.Errorf("copy %s: %w", id, err)
	}
	if err := r.netRows(ctx, id, vals["sandbox"]); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got[c.SandboxID+"/"+c.Generation] = vals // rollbacks share the id, never the generation
	return nil
}

func decodeRows(b []byte) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(bytes.TrimSpace(b), &m); err != nil {
		return nil, fmt.Errorf("decoding %q: %w", b, err)
	}
	return m, nil
}

// sandboxRows are the rows about the copy as a whole: what the Python probe read (identity,
// the connection, the buffered line) and what the host derives from it and its own records
// (is the identity the copy's own, the clocks, the timer).
func sandboxRows(live liveResult, c CopyInfo, before, after time.Time) (map[string]json.RawMessage, error) {
	if live.Sandbox == nil || live.Clock == nil {
		return nil, fmt.Errorf("the Python probe reported no sandbox rows")
	}
	rows := map[string]json.RawMessage{}
	for k, v := range live.Sandbox {
		rows[k] = v
	}
	var gen, sid string
	_ = json.Unmarshal(rows["/run/zygo/generation"], &gen)
	_ = json.Unmarshal(rows["sandbox id (identity.json)"], &sid)
	ck := live.Clock
	trig := time.UnixMicro(int64(ck.Trigger.Wall * 1e6))
	uncounted := (ck.Trigger.Wall - ck.Armed.Wall) - (ck.Trigger.Mono - ck.Armed.Mono)
	set := func(k string, v any) { rows[k], _ = json.Marshal(v) }
	set("generation is the copy's own (the host's record)", gen == c.Generation)
	set("sandbox id is the copy's own (the host's record)", sid == c.SandboxID)
	set("wall clock agrees with the host's (±1 s)", !trig.Before(before.Add(-time.Second)) && !trig.After(after.Add(time.Second)))
	set(RowMonotonic, roundTo(uncounted, 1))
	if ck.SuspendedNS != nil {
		set("suspended_ns in identity.json (s)", roundTo(float64(*ck.SuspendedNS)/1e9, 0.1))
	}
	if ck.Fired == nil {
		set(RowTimer, "did not fire")
	} else {
		set(RowTimer, roundTo(ck.Fired.Mono-ck.Armed.Mono, 0.1))
	}
	return rows, nil
}

// roundTo rounds x to a multiple of step, never to -0 (which JSON spells "-0").
func roundTo(x, step float64) float64 {
	r := math.Round(x/step) * step
	if r == 0 {
		return 0
	}
	return math.Round(r*1e6) / 1e6 // 0.30000000000000004 -> 0.3
}

// Rows of the copy's network identity (netRows).
const (
	RowMAC       = "network: MAC (ip link)"
	RowIPv4      = "network: IPv4 address (ip addr)"
	RowHostAddr  = "network: address the host reaches it at (its record)"
	RowOwnRecord = "network: the address inside is the host's record"
	// RowHostConn is the Python probe's (probe.py EXT_ROW).
	RowHostConn = "connection from the host, open at the checkpoint"
)

// netRows adds the copy's network identity to rows: its MAC and IPv4 address as `ip` shows
// them inside, and the address the host records for it (which the daemon's port proxy dials).
func (r *sbRun) netRows(ctx context.Context, id string, rows map[string]json.RawMessage) error {
	out, err := r.exec(ctx, id, "/usr/sbin/ip", "-o", "link")
	if err != nil {
		return err
	}
	mac := ""
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); !strings.Contains(l, "LOOPBACK") && len(f) > 1 {
			for i := range f[:len(f)-1] {
				if f[i] == "link/ether" {
					mac = f[i+1]
				}
			}
		}
	}
	if out, err = r.exec(ctx, id, "/usr/sbin/ip", "-o", "-4", "addr", "show", "scope", "global"); err != nil {
		return err
	}
	addr := ""
	if f := strings.Fields(string(out)); len(f) > 3 {
		addr, _, _ = strings.Cut(f[3], "/")
	}
	rec, err := r.m.Get(ctx, id)
	if err != nil {
		return err
	}
	host := ""
	if rec.Net != nil {
		host = rec.Net.Address
	}
	set := func(k string, v any) { rows[k], _ = json.Marshal(v) }
	set(RowMAC, mac)
	set(RowIPv4, addr)
	set(RowHostAddr, host)
	set(RowOwnRecord, addr != "" && addr == host)
	return nil
}
