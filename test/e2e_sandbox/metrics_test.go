package e2esandbox

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/zygo-run/zygo/internal/daemon"
)

// TestSandboxMetrics: after a create, a checkpoint, a fork of 2 and a rollback, /metrics
// counts the sandboxes by state and has one duration per operation (a reseal per restored
// copy), no failure; after zygo sandbox rm none is running.
func TestSandboxMetrics(t *testing.T) {
	d := startDaemon(t)
	src := d.OK("sandbox", "create", "--name", "msrc", "--network", "none")
	cp := d.OK("sandbox", "checkpoint", src)
	kids := lines(d.OK("sandbox", "fork", src, "-n", "2"))
	if len(kids) != 2 {
		t.Fatalf("fork -n 2 printed %q", kids)
	}
	d.OK("sandbox", "rollback", src, "--to", cp)
	fams := scrapeSandboxMetrics(t, d)
	op := func(name, o string) float64 {
		for _, m := range fams[name].GetMetric() {
			if m.GetLabel()[0].GetValue() == o {
				if h := m.GetHistogram(); h != nil {
					return float64(h.GetSampleCount())
				}
				return m.GetCounter().GetValue()
			}
		}
		t.Fatalf("no %s{operation=%q}", name, o)
		return 0
	}
	for o, want := range map[string]float64{"create": 1, "checkpoint": 1, "fork": 1, "rollback": 1, "reseal": 3} {
		if got := op("zygo_sandbox_operation_duration_seconds", o); got != want {
			t.Errorf("%s durations: %v, want %v", o, got, want)
		}
		if got := op("zygo_sandbox_operation_failures_total", o); got != 0 {
			t.Errorf("%s failures: %v, want 0", o, got)
		}
	}
	if got := sandboxesIn(fams, "running"); got != 3 {
		t.Errorf("zygo_sandboxes{state=running} = %v, want 3 (the source and 2 children)", got)
	}
	for _, id := range append(kids, src) {
		d.OK("sandbox", "rm", id)
	}
	if got := sandboxesIn(scrapeSandboxMetrics(t, d), "running"); got != 0 {
		t.Errorf("zygo_sandboxes{state=running} = %v after rm, want 0", got)
	}
}

func sandboxesIn(fams map[string]*dto.MetricFamily, state string) float64 {
	for _, m := range fams["zygo_sandboxes"].GetMetric() {
		if m.GetLabel()[0].GetValue() == state {
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

// scrapeSandboxMetrics GETs /metrics on the daemon's unix socket and parses it.
func scrapeSandboxMetrics(t *testing.T, d *Daemon) map[string]*dto.MetricFamily {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", daemon.SocketPath(d.StateDir))
	}}}
	resp, err := c.Get("http://zygo/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if len(fams["zygo_sandboxes"].GetMetric()) == 0 {
		t.Fatalf("no zygo_sandboxes in /metrics: %v", strings.Join(keys(fams), ", "))
	}
	return fams
}

func keys(m map[string]*dto.MetricFamily) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
