package forkcheck

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox"
)

// sbFilesInPlace is written once the probe files are in the sandbox; the services wait for it
// (they start at boot, before any file can be put).
const sbFilesInPlace = sbWorkDir + "/files-in-place"

// restartService is a probe run as a declared service with on_fork = restart.
func restartService(name string, argv ...string) guest.Service {
	script := fmt.Sprintf("while [ ! -f %s ]; do sleep 0.05; done; exec %s", sbFilesInPlace, strings.Join(argv, " "))
	return guest.Service{Name: name, Argv: []string{"/bin/sh", "-c", script}, OnFork: guest.OnForkRestart}
}

func (r *sbRun) createSource(ctx context.Context) (err error) {
	r.src, err = r.m.Create(ctx, sandbox.CreateOptions{Services: []guest.Service{
		restartService("python-service", sbPython, sbProbeDir+"/probe.py", "service", sbWorkDir, "python-service"),
		restartService("node-service", sbNode, sbProbeDir+"/probe.js", "service", sbWorkDir, "node-service"),
	}})
	if err != nil {
		return fmt.Errorf("creating the source sandbox: %w", err)
	}
	return nil
}

// interpSetup runs in the persistent interpreter before the checkpoint: every generator drawn
// once, a generator object made, a variable set. interpAfter draws again in each copy.
const (
	interpSetup = "import json, random, ssl, numpy\n" +
		"r = random.Random()\n" +
		"random.random(); numpy.random.random(); r.random(); ssl.RAND_bytes(16)\n" +
		"x = 41\n"
	interpAfter = "print(json.dumps({\n" +
		"    'random.random()': random.random(),\n" +
		"    'numpy np.random.random()': float(numpy.random.random()),\n" +
		"    'random.Random() made before the checkpoint': r.random(),\n" +
		"    'ssl.RAND_bytes(16)': ssl.RAND_bytes(16).hex(),\n" +
		"    'x set before the checkpoint': x,\n" +
		"}))\n"
)

// startProbes puts the probe files in the source, starts the listener and the long-lived
// probes, sets up the interpreter and waits until every probe says it is ready. The Python
// probe, which arms the timer, starts last.
func (r *sbRun) startProbes(ctx context.Context) error {
	id := r.src.ID
	if _, err := r.exec(ctx, id, sbGoProbe, "probe", "fresh"); err != nil {
		return fmt.Errorf("the zygo-guest in use has no working probe subcommand; rebuild it with `make build`: %w", err)
	}
	if err := r.putProbeFiles(ctx); err != nil {
		return err
	}
	if err := r.background(ctx, "listener", sbPython, sbProbeDir+"/probe.py", "listener", sbWorkDir, sbPort); err != nil {
		return err
	}
	if _, err := r.wait(ctx, id, 60*time.Second, "listener.ready"); err != nil {
		return err
	}
	for _, p := range [][]string{
		{"node", sbNode, sbProbeDir + "/probe.js", "live", sbWorkDir},
		{"go", sbGoProbe, "probe", "live", sbWorkDir},
	} {
		if err := r.background(ctx, p[0], p[1:]...); err != nil {
			return err
		}
	}
	var out bytes.Buffer
	res, err := r.m.RunCode(ctx, id, guest.CodeRequest{Code: interpSetup, Timeout: time.Minute}, &out, &out)
	if err != nil {
		return fmt.Errorf("setting up the interpreter: %w%s", err, out.String())
	}
	if !res.OK {
		return fmt.Errorf("setting up the interpreter: %s%s", res.Error, out.String())
	}
	if _, err := r.wait(ctx, id, 60*time.Second, "node.ready", "go.ready", "python-service.ready", "node-service.ready"); err != nil {
		return err
	}
	// The Python probe last: its timer must still be pending at the checkpoint, which follows.
	timer := fmt.Sprintf("%g", r.opts.Timer.Seconds())
	if err := r.background(ctx, "python", sbPython, sbProbeDir+"/probe.py", "live", sbWorkDir, sbPort, timer); err != nil {
		return err
	}
	ready, err := r.wait(ctx, id, 60*time.Second, "python.ready")
	if err != nil {
		return err
	}
	var py struct {
		Armed struct{ Wall float64 } `json:"armed"`
	}
	if err := json.Unmarshal(ready["python.ready"], &py); err != nil {
		return fmt.Errorf("decoding python.ready: %w", err)
	}
	r.armed = time.UnixMilli(int64(py.Armed.Wall * 1000))
	return r.connectIn(ctx)
}

// connectIn opens the host's connection to the Python probe's port on the source's own
// address and waits for its echo: a connection across the sandbox's edge, open at the
// checkpoint. The source keeps it until the check ends (cleanup closes it).
func (r *sbRun) connectIn(ctx context.Context) error {
	rec, err := r.m.Get(ctx, r.src.ID)
	if err != nil {
		return err
	}
	if rec.Net == nil {
		return fmt.Errorf("the source sandbox has no network")
	}
	d := net.Dialer{Timeout: 10 * time.Second}
	c, err := d.DialContext(ctx, "tcp4", net.JoinHostPort(rec.Net.Address, sbExtPort))
	if err != nil {
		return fmt.Errorf("connecting to the source's probe: %w", err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 6)
	_, err = c.Write([]byte("hello\n"))
	if err == nil {
		_, err = io.ReadFull(c, buf)
	}
	if err != nil {
		c.Close()
		return fmt.Errorf("the source's probe did not echo: %w", err)
	}
	_ = c.SetDeadline(time.Time{})
	r.hostConn = c
	return nil
}

// putProbeFiles puts probe.py and probe.js in the source, then the file the services wait for.
func (r *sbRun) putProbeFiles(ctx context.Context) error {
	for _, name := range []string{"probe.py", "probe.js"} {
		b, err := sandboxProbeFS.ReadFile("sandboxprobes/" + name)
		if err != nil {
			return err
		}
		if err := r.m.PutFile(ctx, r.src.ID, sbProbeDir+"/"+name, 0o644, bytes.NewReader(b)); err != nil {
			return fmt.Errorf("putting %s in the source sandbox: %w", name, err)
		}
	}
	if err := r.m.PutFile(ctx, r.src.ID, sbFilesInPlace, 0o644, strings.NewReader("")); err != nil {
		return fmt.Errorf("putting %s in the source sandbox: %w", sbFilesInPlace, err)
	}
	return nil
}

// background starts argv in the source sandbox in its own session, detached from the exec
// call, its output going to WORK/NAME.log.
func (r *sbRun) background(ctx context.Context, name string, argv ...string) error {
	cmd := fmt.Sprintf("setsid -f %s >%s/%s.log 2>&1 </dev/null", strings.Join(argv, " "), sbWorkDir, name)
	if _, err := r.exec(ctx, r.src.ID, "/bin/sh", "-c", cmd); err != nil {
		return fmt.Errorf("starting the %s probe: %w", name, err)
	}
	return nil
}

// wait waits (inside sandbox id) for the files WORK/NAME and returns each decoded. On timeout
// the error carries the probes' logs.
func (r *sbRun) wait(ctx context.Context, id string, timeout time.Duration, names ...string) (map[string]json.RawMessage, error) {
	argv := append([]string{sbPython, sbProbeDir + "/probe.py", "wait", sbWorkDir, fmt.Sprintf("%g", timeout.Seconds())}, names...)
	out, err := r.exec(ctx, id, argv...)
	if err != nil {
		logs, _ := r.exec(ctx, id, "/bin/sh", "-c", "tail -n 20 "+sbWorkDir+"/*.log")
		return nil, fmt.Errorf("waiting for the probes: %w\nprobe logs:\n%s", err, logs)
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal(out, &got); err != nil {
		return nil, fmt.Errorf("decoding the probes' files %q: %w", out, err)
	}
	return got, nil
}

// checkpoint takes the checkpoint every copy is made from, and checks that the Python probe's
// timer was still pending then (else every copy would report the same firing).
func (r *sbRun) checkpoint(ctx context.Context) (err error) {
	if r.cp, err = r.m.Checkpoint(ctx, r.src.ID, "zygo-check"); err != nil {
		return fmt.Errorf("checkpointing the source: %w", err)
	}
	if late := r.cp.CreatedAt.Sub(r.armed.Add(r.opts.Timer)); late > -time.Second {
		return fmt.Errorf("the probes' %v timer ran out before the checkpoint was taken (%v after arming); run again with a longer --timer",
			r.opts.Timer, r.cp.CreatedAt.Sub(r.armed).Round(time.Millisecond))
	}
	return nil
}
