package guest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRunCodeOutputIsBounded: a call printing 40 MiB gets exactly MaxCodeOutputBytes of it,
// then the marker, and the interpreter and its variables are still there for the next call.
// So are they after a huge value, a 20 MiB line written straight to the event pipe, and a
// caller that leaves while its code floods output.
func TestRunCodeOutputIsBounded(t *testing.T) {
	c, _ := startPair(t, strings.Repeat("t", 64))
	ctx := waitCtx(t)
	if res, err := c.RunCode(ctx, CodeRequest{Code: "x = 41"}, nil, nil); err != nil || !res.OK {
		t.Fatalf("%+v %v", res, err)
	}
	var out, errb bytes.Buffer
	res, err := c.RunCode(ctx, CodeRequest{Code: "print('y' * (40 << 20)); 'after'"}, &out, &errb)
	if err != nil || !res.OK || !res.OutputTruncated || res.Value != "'after'" {
		t.Fatalf("40 MiB print = %+v %v", res, err)
	}
	if out.Len() != MaxCodeOutputBytes || strings.Trim(out.String(), "y") != "" {
		t.Errorf("stdout has %d bytes (not only 'y'?), want exactly %d", out.Len(), MaxCodeOutputBytes)
	}
	if errb.String() != OutputTruncatedMarker {
		t.Errorf("stderr %q, want the marker %q", errb.String(), OutputTruncatedMarker)
	}
	next, err := c.RunCode(ctx, CodeRequest{Code: "x + 1"}, nil, nil)
	if err != nil || next.Value != "42" || next.OutputTruncated {
		t.Fatalf("the call after a truncated one = %+v %v, want 42 (variables kept)", next, err)
	}

	// A huge value is cut, with a marker.
	res, err = c.RunCode(ctx, CodeRequest{Code: "'z' * (20 << 20)"}, nil, nil)
	if err != nil || !res.OK || len(res.Value) > MaxCodeValueBytes+100 || !strings.Contains(res.Value, "[zygo: value truncated") {
		t.Fatalf("huge value: ok=%v len %d err %v", res.OK, len(res.Value), err)
	}

	// A 20 MiB line (no JSON) straight onto the event pipe is skipped; the call still ends.
	res, err = c.RunCode(ctx, CodeRequest{Code: "import os\nos.write(4, b'q' * (20 << 20) + b'\\n')\nx"}, nil, nil)
	if err != nil || res.Value != "41" {
		t.Fatalf("after a 20 MiB line on fd 4: %+v %v", res, err)
	}

	// A caller that goes away while its code floods output does not wedge the interpreter.
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = c.RunCode(cctx, CodeRequest{Code: "while True: print('flood' * 1000)"}, nil, nil)
	cancel()
	if err == nil {
		t.Fatalf("a call whose caller left returned no error")
	}
	next, err = c.RunCode(ctx, CodeRequest{Code: "x"}, nil, nil)
	if err != nil || next.Value != "41" {
		t.Fatalf("the call after a caller left = %+v %v, want 41", next, err)
	}
}

// TestRunCodeTimeoutEscalates: code that swallows KeyboardInterrupt is killed InterruptGrace
// after its timeout; the call says the interpreter was restarted, and the next call gets a
// fresh one. Code that honours the interrupt keeps the interpreter and its variables.
func TestRunCodeTimeoutEscalates(t *testing.T) {
	c, _ := startPair(t, strings.Repeat("t", 64))
	ctx := waitCtx(t)
	res, err := c.RunCode(ctx, CodeRequest{Code: "import os, time\nx = 1\nos.getpid()"}, nil, nil)
	if err != nil || !res.OK {
		t.Fatalf("%+v %v", res, err)
	}
	oldPID, _ := strconv.Atoi(res.Value)

	// Honoured: a timed-out call, variables kept.
	res, err = c.RunCode(ctx, CodeRequest{Code: "y = 7\ntime.sleep(100)", Timeout: 300 * time.Millisecond}, nil, nil)
	if err != nil || res.OK || res.Restarted || !strings.Contains(res.Error, "timed out") || !strings.Contains(res.Error, "KeyboardInterrupt") {
		t.Fatalf("an interrupted sleep = %+v %v", res, err)
	}
	if res, _ := c.RunCode(ctx, CodeRequest{Code: "(x, y, os.getpid())"}, nil, nil); res.Value != "(1, 7, "+strconv.Itoa(oldPID)+")" {
		t.Fatalf("after an honoured interrupt: %q, want the same interpreter", res.Value)
	}

	// Swallowed: killed and restarted.
	swallow := "while True:\n    try:\n        time.sleep(10)\n    except KeyboardInterrupt:\n        pass\n"
	t0 := time.Now()
	res, err = c.RunCode(ctx, CodeRequest{Code: swallow, Timeout: 500 * time.Millisecond}, nil, nil)
	took := time.Since(t0)
	if err != nil || res.OK || !res.Restarted {
		t.Fatalf("code swallowing KeyboardInterrupt = %+v %v, want Restarted", res, err)
	}
	for _, want := range []string{"interpreter restarted", "timed out", "did not stop", "variables are lost"} {
		if !strings.Contains(res.Error, want) {
			t.Errorf("restart error %q does not say %q", res.Error, want)
		}
	}
	if took < 500*time.Millisecond+InterruptGrace || took > 500*time.Millisecond+InterruptGrace+5*time.Second {
		t.Errorf("the call took %v, want the timeout plus the %v grace and a little", took, InterruptGrace)
	}
	t.Logf("swallowed KeyboardInterrupt: answered after %v", took.Round(time.Millisecond))
	if err := syscall.Kill(oldPID, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the old interpreter %d is still there (kill 0: %v)", oldPID, err)
	}
	res, err = c.RunCode(ctx, CodeRequest{Code: "import os\n('x' in globals(), os.getpid() != " + strconv.Itoa(oldPID) + ", 1 + 1)"}, nil, nil)
	if err != nil || res.Value != "(False, True, 2)" {
		t.Fatalf("the call after a restart = %+v %v, want a fresh interpreter", res, err)
	}

	// SIGINT ignored in C (the handler replaced), and a child holding the old pipes: same.
	res, err = c.RunCode(ctx, CodeRequest{Code: "import signal, subprocess, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n" +
		"subprocess.Popen(['/bin/sh', '-c', 'trap \"\" INT; sleep 100'])\ntime.sleep(100)", Timeout: 300 * time.Millisecond}, nil, nil)
	if err != nil || !res.Restarted {
		t.Fatalf("ignored SIGINT = %+v %v, want Restarted", res, err)
	}
	if res, err := c.RunCode(ctx, CodeRequest{Code: "2 + 2"}, nil, nil); err != nil || res.Value != "4" {
		t.Fatalf("after a restart with a child left: %+v %v", res, err)
	}
}

// TestRunCodeQueuedTimeoutDoesNotInterruptOthers: a call waiting for the interpreter times out
// without running, and without interrupting the call that runs.
func TestRunCodeQueuedTimeoutDoesNotInterruptOthers(t *testing.T) {
	c, _ := startPair(t, strings.Repeat("t", 64))
	ctx := waitCtx(t)
	if res, err := c.RunCode(ctx, CodeRequest{Code: "import time"}, nil, nil); err != nil || !res.OK {
		t.Fatalf("%+v %v", res, err)
	}
	first := make(chan CodeResult, 1)
	go func() {
		res, _ := c.RunCode(ctx, CodeRequest{Code: "time.sleep(1.5); 'first'"}, nil, nil)
		first <- res
	}()
	time.Sleep(300 * time.Millisecond) // let the first one start
	res, err := c.RunCode(ctx, CodeRequest{Code: "'second'", Timeout: 200 * time.Millisecond}, nil, nil)
	if err != nil || res.OK || !strings.Contains(res.Error, "did not run") {
		t.Errorf("queued call = %+v %v, want a timeout that did not run", res, err)
	}
	if res := <-first; !res.OK || res.Value != "'first'" {
		t.Errorf("the running call = %+v, want it undisturbed", res)
	}
}

// TestRunCodeCapturesFds: the interpreter's fds 1 and 2 are pipes to the agent; what arrives
// there during a call (a subprocess, os.write) is that call's output, bounded with the rest;
// what arrives between calls is drained and dropped, so a writer never blocks.
func TestRunCodeCapturesFds(t *testing.T) {
	c, _ := startPair(t, strings.Repeat("t", 64))
	ctx := waitCtx(t)
	var out, errb bytes.Buffer
	res, err := c.RunCode(ctx, CodeRequest{Code: "import os, subprocess\n" +
		"subprocess.run(['echo', 'from-child'])\nos.write(2, b'raw-err\\n')\nprint('py')\n" +
		"(os.readlink('/proc/self/fd/1'), os.readlink('/proc/self/fd/2'))"}, &out, &errb)
	if err != nil || !res.OK {
		t.Fatalf("%+v %v", res, err)
	}
	if !strings.Contains(out.String(), "from-child\n") || !strings.Contains(out.String(), "py\n") || errb.String() != "raw-err\n" {
		t.Errorf("stdout %q stderr %q, want the child's line and print's on stdout, the raw write on stderr", out.String(), errb.String())
	}
	if !strings.HasPrefix(res.Value, "('pipe:") || !strings.Contains(res.Value, ", 'pipe:") {
		t.Errorf("fds 1 and 2 are %s, want pipes", res.Value)
	}

	// Raw writes count against the call's bound.
	out.Reset()
	errb.Reset()
	res, err = c.RunCode(ctx, CodeRequest{Code: "for _ in range(40): os.write(1, b'X' * (1 << 20))"}, &out, &errb)
	if err != nil || !res.OK || !res.OutputTruncated || out.Len() != MaxCodeOutputBytes || errb.String() != OutputTruncatedMarker {
		t.Fatalf("40 MiB of os.write = %+v %v, stdout %d bytes, stderr %q", res, err, out.Len(), errb.String())
	}

	// Between calls: 50 MB from a process the code left behind is drained and dropped.
	done := filepath.Join(t.TempDir(), "done")
	res, err = c.RunCode(ctx, CodeRequest{Code: "subprocess.Popen(['/bin/sh', '-c', 'sleep 0.3; echo late; head -c 50000000 /dev/zero; echo ok > " + done + "'])"}, nil, nil)
	if err != nil || !res.OK {
		t.Fatalf("%+v %v", res, err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for _, err := os.Stat(done); err != nil; _, err = os.Stat(done) {
		if time.Now().After(deadline) {
			t.Fatal("a writer between calls is still blocked after 15 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	out.Reset()
	res, err = c.RunCode(ctx, CodeRequest{Code: "print('next')"}, &out, nil)
	if err != nil || !res.OK || out.String() != "next\n" {
		t.Errorf("the call after = %+v %v stdout %q, want only its own output", res, err, out.String())
	}
}

// TestRunCodeReseedCoversUUIDAndTempNames: after a reseal the interpreter runs the one reseed
// module (agents/python/zygo_agent/reseedcore.py) before the next code: what a copy would
// repeat — the global random, a generator object hidden in the user's namespace, uuid1's
// libuuid clock sequence, tempfile's name generator — is renewed, and tempfile.tempdir as the
// code set it is kept.
func TestRunCodeReseedCoversUUIDAndTempNames(t *testing.T) {
	c, _ := startPair(t, strings.Repeat("t", 64))
	ctx := waitCtx(t)
	setup := "import random, tempfile, uuid\n" +
		"uuid.uuid1(); next(tempfile._get_candidate_names()); tempfile.tempdir = '/tmp'\n" +
		"hidden = {'r': random.Random(3)}\n" +
		"before = (random.getstate(), hidden['r'].getstate(), tempfile._name_sequence)\n" +
		"uuid._generate_time_safe is not None"
	if res, err := c.RunCode(ctx, CodeRequest{Code: setup}, nil, nil); err != nil || !res.OK || res.Value != "True" {
		t.Fatalf("setup = %+v %v (want libuuid in use)", res, err)
	}
	if _, err := c.Reseal(ctx, resealReq(strings.Repeat("n", 64), time.Now())); err != nil {
		t.Fatal(err)
	}
	check := "[random.getstate() != before[0], hidden['r'].getstate() != before[1], " +
		"tempfile._get_candidate_names() is not before[2], uuid._generate_time_safe is None, " +
		"uuid._last_timestamp is None, tempfile.tempdir]"
	var errb bytes.Buffer
	res, err := c.RunCode(ctx, CodeRequest{Code: check}, nil, &errb)
	if err != nil || !res.OK {
		t.Fatalf("check = %+v %v", res, err)
	}
	if want := "[True, True, True, True, True, '/tmp']"; res.Value != want || errb.Len() != 0 {
		t.Errorf("after reseal [random, hidden Random, temp names, uuid1 path, uuid1 timestamp, tempdir] = %s (stderr %q), want %s",
			res.Value, errb.String(), want)
	}
}
