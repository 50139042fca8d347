package forkcheck

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/zygo-run/zygo/sdk/go/wire"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// The pools audit (`zygo check pools`): two tenants share a runtime pool; in
// each round tenant A leaves everything it can behind (globals, a
// monkeypatch, a module, env, files in TMPDIR, /tmp and /dev/shm) and holds
// a secret in a request still running, while tenant B looks for all of it,
// for A's scripts and for processes it can signal. Every row but the
// documented ones must show nothing of A's in every round.

// PoolNames are the pools the audit makes (and removes).
const (
	PoolShared    = "zygo-check-pool"
	PoolPerTenant = "zygo-check-pool-iso"
	poolTenantA   = "check-a"
	poolTenantB   = "check-b"
	poolSecret    = "TOKEN"
)

// poolPlant is tenant A's script: it plants, and (with sleep) holds its secret a while.
const poolPlant = `import os, sys, json, string, time
def handler(event, context):
    global PLANTED
    PLANTED = event["mark"]
    string.capwords = lambda *a, **k: event["mark"]
    sys.modules["zygo_check_" + event["mark"]] = object()
    os.environ["ZYGO_CHECK_MARK"] = event["mark"]
    open(os.path.join(os.environ["TMPDIR"], event["mark"]), "w").write(event["mark"])
    for d in ("/tmp", "/dev/shm"):
        try:
            open(os.path.join(d, event["mark"]), "w").write(event["mark"])
        except OSError:
            pass
        try:
            os.mkdir(os.path.join(d, event["mark"] + "-dir"))
        except OSError:
            pass
    time.sleep(event.get("hold", 0))
    return {"layout": id(json)}
`

// poolLook is tenant B's script: what it finds of A's.
const poolLook = `import os, sys, json, string
def handler(event, context):
    mark = event["mark"]
    left = []
    for d in ("/tmp", "/dev/shm"):
        left += [n for n in os.listdir(d) if n.startswith(mark)]
    me, signalled = os.getpid(), 0
    for pid in [int(p) for p in os.listdir("/proc") if p.isdigit()]:
        if pid != me:
            try:
                os.kill(pid, 0)
                signalled += 1
            except OSError:
                pass
    scripts = 0
    for top in os.listdir("/"):
        if top in ("proc", "sys", "dev", "usr") or os.path.islink("/" + top):
            continue
        for root, dirs, files in os.walk("/" + top):
            scripts += sum(1 for f in files if f == "main.py")
    secrets = []
    try:
        secrets = os.listdir("/run/secrets")
    except OSError:
        pass
    return {
        "globals of another tenant": "PLANTED" in globals(),
        "monkeypatch of another tenant": string.capwords("a b") == mark,
        "sys.modules of another tenant": ("zygo_check_" + mark) in sys.modules,
        "env of another tenant": os.environ.get("ZYGO_CHECK_MARK") == mark,
        "files another tenant left in /tmp, /dev/shm": len(left),
        "TMPDIR files of another tenant": len(os.listdir(os.environ["TMPDIR"])),
        "secret files of another tenant": len(secrets),
        "processes it can signal": signalled,
        "scripts on its filesystem": scripts,
        "layout": id(json),
    }
`

var poolSpecs = map[string]Spec{
	"globals of another tenant":     {Expect: Same, Want: "false", Why: "every request is a fresh fork of the clean zygote"},
	"monkeypatch of another tenant": {Expect: Same, Want: "false", Why: "every request is a fresh fork of the clean zygote"},
	"sys.modules of another tenant": {Expect: Same, Want: "false", Why: "every request is a fresh fork of the clean zygote"},
	"env of another tenant":         {Expect: Same, Want: "false", Why: "every request is a fresh fork of the clean zygote"},
	"files another tenant left in /tmp, /dev/shm": {Expect: Same, Want: "0",
		Why: "a pool request may change the filesystem only beneath its own request directory (nested Landlock domain)"},
	"TMPDIR files of another tenant": {Expect: Same, Want: "0", Why: "TMPDIR is the request's own directory, removed after it"},
	"secret files of another tenant": {Expect: Same, Want: "0",
		Why: "a request with secrets runs in its tenant's own zygote; the shared one has no /run/secrets"},
	"processes it can signal": {Expect: Same, Want: "0", Why: "each request is in a Landlock domain of its own that scopes signals"},
	"scripts on its filesystem": {Expect: Same, Want: "0",
		Why: "scripts are never bound into the sandbox; a request gets its own as a detached mount"},
	"address layout shared with another tenant (shared)": {Expect: Documented,
		Why:        "children of one zygote share its address layout (ASLR), whoever their tenant",
		Mitigation: `isolation = "zygote-per-tenant": a zygote per tenant (row below)`},
	"address layout shared with another tenant (zygote-per-tenant)": {Expect: Same, Want: "false",
		Why: "each tenant's zygote starts on its own and has its own layout"},
	"timing of another tenant's request": {Expect: Documented,
		Why:        "tenants' requests run at once on the same CPUs and caches; one can observe the load of another",
		Mitigation: "separate pools (or hosts) for tenants that must not observe each other's load"},
}

// PoolsReport is the pools audit's result.
type PoolsReport struct {
	N      int      `json:"n"`
	Series []string `json:"series"`
	Rows   []Row    `json:"rows"`
}

// RunPools makes the two pools and tenant A's secret, runs n rounds (A
// plants while holding its secret, B looks) and evaluates the rows. It
// removes the pools at the end.
func RunPools(ctx context.Context, c *zygo.Client, n int) (*PoolsReport, error) {
	for _, up := range []string{
		fmt.Sprintf("kind = \"pool\"\nname = %q\npreload = [\"json\"]\n", PoolShared),
		fmt.Sprintf("kind = \"pool\"\nname = %q\npreload = [\"json\"]\nisolation = \"zygote-per-tenant\"\n", PoolPerTenant),
	} {
		if _, err := c.PoolUp(ctx, []byte(up)); err != nil {
			return nil, fmt.Errorf("making the audit's pools: %w", err)
		}
	}
	defer func() {
		_ = c.RemovePool(context.WithoutCancel(ctx), PoolShared)
		_ = c.RemovePool(context.WithoutCancel(ctx), PoolPerTenant)
	}()
	if err := c.SetTenantSecret(ctx, poolTenantA, poolSecret, []byte(randomMark())); err != nil {
		return nil, err
	}
	defer func() { _ = c.RemoveTenantSecret(context.WithoutCancel(ctx), poolTenantA, poolSecret) }()
	var values []map[string]json.RawMessage
	for i := 0; i < n; i++ {
		row, err := poolRound(ctx, c)
		if err != nil {
			return nil, fmt.Errorf("round %d: %w", i+1, err)
		}
		values = append(values, row)
	}
	series := []Series{{Name: "rounds", Values: values}}
	return &PoolsReport{N: n, Series: []string{"rounds"}, Rows: Evaluate("pools", poolSpecs, series)}, nil
}

// poolRound runs one round and returns its row values.
func poolRound(ctx context.Context, c *zygo.Client) (map[string]json.RawMessage, error) {
	mark := "m" + randomMark()
	ev := func(v map[string]any) json.RawMessage { b, _ := json.Marshal(v); return b }
	var wg sync.WaitGroup
	var holdErr error
	wg.Add(1)
	go func() { // A holds its secret in its own zygote while B looks
		defer wg.Done()
		_, holdErr = c.RunScript(ctx, PoolShared, wire.PoolRunRequest{Tenant: poolTenantA, Source: poolPlant,
			Event: ev(map[string]any{"mark": mark, "hold": 1}), Secrets: []string{poolSecret}})
	}()
	a, err := c.RunScript(ctx, PoolShared, wire.PoolRunRequest{Tenant: poolTenantA, Source: poolPlant, Event: ev(map[string]any{"mark": mark})})
	if err != nil {
		return nil, err
	}
	b, err := c.RunScript(ctx, PoolShared, wire.PoolRunRequest{Tenant: poolTenantB, Source: poolLook, Event: ev(map[string]any{"mark": mark})})
	if err != nil {
		return nil, err
	}
	wg.Wait()
	if holdErr != nil {
		return nil, holdErr
	}
	var av struct{ Layout int64 }
	var row map[string]json.RawMessage
	if json.Unmarshal(a.Value, &av) != nil || json.Unmarshal(b.Value, &row) != nil {
		return nil, fmt.Errorf("decoding the probes' values %s %s", a.Value, b.Value)
	}
	var bl int64
	_ = json.Unmarshal(row["layout"], &bl)
	row["address layout shared with another tenant (shared)"] = jsonBool(bl == av.Layout)
	ia, err := c.RunScript(ctx, PoolPerTenant, wire.PoolRunRequest{Tenant: poolTenantA, Source: poolPlant, Event: ev(map[string]any{"mark": mark})})
	if err != nil {
		return nil, err
	}
	ib, err := c.RunScript(ctx, PoolPerTenant, wire.PoolRunRequest{Tenant: poolTenantB, Source: poolPlant, Event: ev(map[string]any{"mark": mark + "b"})})
	if err != nil {
		return nil, err
	}
	var x, y struct{ Layout int64 }
	_ = json.Unmarshal(ia.Value, &x)
	_ = json.Unmarshal(ib.Value, &y)
	row["address layout shared with another tenant (zygote-per-tenant)"] = jsonBool(x.Layout == y.Layout)
	row["timing of another tenant's request"] = json.RawMessage(`"observable"`)
	return row, nil
}

func jsonBool(b bool) json.RawMessage {
	if b {
		return json.RawMessage("true")
	}
	return json.RawMessage("false")
}

func randomMark() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
