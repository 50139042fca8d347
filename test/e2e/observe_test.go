package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/zygo-run/zygo/internal/daemon"
)

// scrapeMetrics GETs /metrics from c at url and parses the text format.
func scrapeMetrics(t *testing.T, c *http.Client, url, token string) map[string]*dto.MetricFamily {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
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
	return fams
}

// sample returns the value of the series of family name whose labels include want (a
// counter's, a gauge's, or a histogram's sample count), and whether there is one.
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	for _, m := range fams[name].GetMetric() {
		match := 0
		for _, l := range m.GetLabel() {
			if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
				match++
			}
		}
		if match != len(want) {
			continue
		}
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue(), true
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue(), true
		case m.GetHistogram() != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

var (
	listenRE        = regexp.MustCompile(`"listen":"(127\.0\.0\.1:\d+)"`)
	metricsListenRE = regexp.MustCompile(`"metrics_listen":"(127\.0\.0\.1:\d+)"`)
)

// TestMetricsAfterTraffic: after N requests of a function (one failing) /metrics counts them
// by outcome, has N latency samples, its gauges are back at 0, the zygote's memory is read,
// a killed zygote counts as a restart, the Go and process collectors are there, the TCP
// listener serves it behind the token (a call without one is logged with its address), and
// zygo rm removes the function's series.
func TestMetricsAfterTraffic(t *testing.T) {
	d := startDaemonArgs(t, "--log-format", "json", "--log-level", "debug", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")
	d.Up(writeFunction(t, map[string]string{
		"zygo.toml": "name = \"obs\"\nruntime = \"python\"\nhandler = \"main:handler\"\nprefork = 1\n",
		"main.py": `
def handler(event, context):
    if event.get("fail"):
        raise ValueError("asked to fail")
    print("served", event.get("i"))
    return event.get("i")
`}))
	const n = 5
	for i := range n {
		d.Invoke("obs", map[string]any{"i": i}, nil)
	}
	if _, err := d.TryInvoke("obs", map[string]any{"fail": true}); apiError(t, err).Code != "handler_error" {
		t.Fatalf("the failing request: %v", err)
	}
	c := unixHTTP(d)
	fams := scrapeMetrics(t, c, "http://zygo/metrics", "")
	fn := map[string]string{"function": "obs"}
	checks := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"zygo_function_requests_total", map[string]string{"function": "obs", "outcome": "ok"}, n},
		{"zygo_function_requests_total", map[string]string{"function": "obs", "outcome": "handler_error"}, 1},
		{"zygo_function_requests_total", map[string]string{"function": "obs", "outcome": "timeout"}, 0},
		{"zygo_function_request_duration_seconds", fn, n + 1},
		{"zygo_function_requests_in_flight", fn, 0},
		{"zygo_function_requests_waiting", fn, 0},
		{"zygo_function_zygote_restarts_total", fn, 0},
	}
	for _, c := range checks {
		if got, ok := sample(fams, c.name, c.labels); !ok || got != c.want {
			t.Errorf("%s%v = %v (present %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	for _, name := range []string{"zygo_function_zygote_rss_bytes", "zygo_function_zygote_pss_bytes"} {
		if got, ok := sample(fams, name, fn); !ok || got < 1<<20 {
			t.Errorf("%s = %v (present %v): want the zygote's memory, at least 1 MiB", name, got, ok)
		}
	}
	if _, ok := sample(fams, "zygo_function_pool_idle", fn); !ok {
		t.Errorf("no zygo_function_pool_idle of obs")
	}
	for _, name := range []string{"go_goroutines", "process_open_fds"} {
		if got, ok := sample(fams, name, nil); !ok || got <= 0 {
			t.Errorf("%s = %v (present %v)", name, got, ok)
		}
	}

	// A zygote that dies is restarted and counted.
	st, err := d.Client.Function(context.Background(), "obs")
	if err != nil || st.ZygotePID == 0 {
		t.Fatalf("function status %+v, %v", st, err)
	}
	if err := syscall.Kill(st.ZygotePID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if got, _ := sample(scrapeMetrics(t, c, "http://zygo/metrics", ""), "zygo_function_zygote_restarts_total", fn); got == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("zygo_function_zygote_restarts_total never reached 1 after the zygote was killed; log:\n%s", d.Log)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The TCP listener serves /metrics behind the token only.
	m := listenRE.FindStringSubmatch(d.Log.String())
	if m == nil {
		t.Fatalf("no listen address in the log:\n%s", d.Log)
	}
	tok, err := os.ReadFile(daemon.TokenPath(d.StateDir))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + m[1] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("GET /metrics on TCP without the token: %d, want 401", resp.StatusCode)
	}
	waitLog(t, d, `"msg":"authentication failed"`)
	if !regexp.MustCompile(`"msg":"authentication failed".*"remote_addr":"127\.0\.0\.1:\d+"`).MatchString(d.Log.String()) {
		t.Errorf("the refused call is not logged with its address:\n%s", d.Log)
	}
	if got, _ := sample(scrapeMetrics(t, http.DefaultClient, "http://"+m[1]+"/metrics", strings.TrimSpace(string(tok))),
		"zygo_function_requests_total", map[string]string{"function": "obs", "outcome": "ok"}); got != n {
		t.Errorf("ok requests on TCP %v, want %d", got, n)
	}

	// --metrics-listen serves /metrics alone, without a token.
	mm := metricsListenRE.FindStringSubmatch(d.Log.String())
	if mm == nil {
		t.Fatalf("no metrics_listen address in the log:\n%s", d.Log)
	}
	if got, _ := sample(scrapeMetrics(t, http.DefaultClient, "http://"+mm[1]+"/metrics", ""),
		"zygo_function_requests_total", map[string]string{"function": "obs", "outcome": "handler_error"}); got != 1 {
		t.Errorf("handler errors on --metrics-listen %v, want 1", got)
	}
	if resp, err := http.Get("http://" + mm[1] + "/v1/status"); err != nil || resp.StatusCode != 404 {
		t.Errorf("GET /v1/status on --metrics-listen: %v %v, want 404", resp, err)
	} else {
		resp.Body.Close()
	}

	if _, errOut, code := d.CLI("rm", "obs"); code != 0 {
		t.Fatalf("zygo rm: %s", errOut)
	}
	fams = scrapeMetrics(t, c, "http://zygo/metrics", "")
	for name, fam := range fams {
		for _, s := range fam.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "function" && l.GetValue() == "obs" {
					t.Errorf("%s still has a series of the removed function", name)
				}
			}
		}
	}
	waitLog(t, d, `"msg":"function deployed","function":"obs"`)
	waitLog(t, d, `"msg":"function removed","function":"obs"`)
}

var logLineRE = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z r-[0-9a-f-]+ (stdout|stderr|zygo) `)

// TestLogsOperatorView: a caller's X-Request-Id is echoed, in the daemon's debug record of
// the call and with the request's lines (zygo logs --request finds them by it); zygo logs
// prints dates, --tail N prints N lines, --since takes a duration and refuses garbage (the
// API names since), -f alone prints only new lines; a secret change is logged by name only.
func TestLogsOperatorView(t *testing.T) {
	d := startDaemonArgs(t, "--log-format", "json", "--log-level", "debug", "--log-retention-lines", "1000")
	d.Up(writeFunction(t, map[string]string{
		"zygo.toml": "name = \"tail\"\nruntime = \"python\"\nhandler = \"main:handler\"\n",
		"main.py": `
def handler(event, context):
    print("line of", event["tag"])
    return 1
`}))
	for i := range 3 {
		d.Invoke("tail", map[string]any{"tag": fmt.Sprint("old-", i)}, nil)
	}
	c := unixHTTP(d)
	req, _ := http.NewRequest("POST", "http://zygo/v1/functions/tail/invoke", strings.NewReader(`{"tag": "traced"}`))
	req.Header.Set("X-Request-Id", "e2e-caller-7")
	req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Request-Id") != "e2e-caller-7" ||
		resp.Header.Get("Traceparent") != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Fatalf("invoke with caller ids: %d %v", resp.StatusCode, resp.Header)
	}
	ours := resp.Header.Get("X-Zygo-Request-Id")
	waitLog(t, d, `"request_id":"`+ours+`","caller_id":"e2e-caller-7"`) // the debug record of the call
	out, errOut, code := d.CLI("logs", "tail", "--request", "e2e-caller-7")
	if code != 0 || !strings.Contains(out, "line of traced") || !strings.Contains(out, "(caller id e2e-caller-7)") || strings.Contains(out, "old-") {
		t.Errorf("zygo logs --request CALLER-ID: %d\n%s%s", code, out, errOut)
	}

	out, _, code = d.CLI("logs", "tail", "--tail", "2")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.Contains(lines[0], "line of traced") {
		t.Errorf("zygo logs --tail 2: %d\n%s", code, out)
	}
	for _, l := range lines {
		if !logLineRE.MatchString(l) {
			t.Errorf("line without an RFC 3339 UTC time: %q", l)
		}
	}
	if out, _, code = d.CLI("logs", "tail", "--since", "1h"); code != 0 || !strings.Contains(out, "line of old-0") {
		t.Errorf("zygo logs --since 1h: %d\n%s", code, out)
	}
	if _, errOut, code = d.CLI("logs", "tail", "--since", "last tuesday"); code == 0 || !strings.Contains(errOut, `--since "last tuesday"`) {
		t.Errorf("zygo logs --since garbage: exit %d, %s", code, errOut)
	}
	resp, err = c.Get("http://zygo/v1/functions/tail/logs?since=last-tuesday")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), `"message": "since: `) {
		t.Errorf("?since=garbage: %d %s", resp.StatusCode, b)
	}

	// -f alone: only lines stored after it started.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	follow := execZygoCtx(ctx, "--state-dir", d.StateDir, "logs", "tail", "-f")
	stdout, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	waitLog(t, d, `"route":"GET /v1/functions/{name}/logs","status":400`) // the last call before is logged
	calls := strings.Count(d.Log.String(), `"route":"GET /v1/functions/{name}/logs"`)
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	defer follow.Wait()
	for deadline := time.Now().Add(time.Minute); strings.Count(d.Log.String(), `"route":"GET /v1/functions/{name}/logs"`) == calls; {
		if time.Now().After(deadline) {
			t.Fatalf("zygo logs -f made no call in a minute; daemon log:\n%s", d.Log)
		}
		time.Sleep(20 * time.Millisecond) // until its first call (from the end) was answered
	}
	d.Invoke("tail", map[string]any{"tag": "new-one"}, nil)
	stop := time.AfterFunc(time.Minute, cancel) // a follower that never prints it ends the scan
	defer stop.Stop()
	sc := bufio.NewScanner(stdout)
	var seen []string
	for sc.Scan() {
		seen = append(seen, sc.Text())
		if strings.Contains(sc.Text(), "line of new-one") {
			break
		}
	}
	cancel()
	if len(seen) == 0 || !strings.Contains(seen[len(seen)-1], "line of new-one") || strings.Contains(strings.Join(seen, "\n"), "old-") {
		t.Errorf("zygo logs -f printed:\n%s", strings.Join(seen, "\n"))
	}

	out, errOut, code = d.Process.CLI("value-never-logged-7f3", time.Minute, "secret", "set", "OBS_KEY")
	if code != 0 {
		t.Fatalf("zygo secret set: %s %s", out, errOut)
	}
	waitLog(t, d, `"msg":"secret set","secret":"OBS_KEY"`)
	if strings.Contains(d.Log.String(), "value-never-logged-7f3") {
		t.Errorf("the secret's value is in the daemon's log:\n%s", d.Log)
	}
}

// TestServeRefusesBadObservabilityFlags: a bad --log-format, --log-level,
// --log-retention-lines or --metrics-listen stops the daemon at start, naming the flag.
func TestServeRefusesBadObservabilityFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--log-format", "xml"}, {"--log-level", "loud"}, {"--log-retention-lines", "0"}, {"--log-retention-lines", "99999999999"},
		{"--metrics-listen", "0.0.0.0:9100"}, {"--metrics-listen", "nonsense"},
	} {
		cmd := execZygo(append([]string{"serve", "--state-dir", t.TempDir()}, args...)...)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), args[0]+" ") {
			t.Errorf("zygo serve %v: %v\n%s", args, err, out)
		}
	}
}

// waitLog waits (at most 10 s) until the daemon's log holds s: a record written after the
// answer it is about may reach the log after the caller has the answer.
func waitLog(t *testing.T, d *Daemon, s string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(d.Log.String(), s); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon's log has no %s:\n%s", s, d.Log)
		}
	}
}

func execZygoCtx(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, zygoBin, args...)
}
