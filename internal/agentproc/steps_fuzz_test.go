package agentproc

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/untrusted"
)

// refResult is result.json decoded as it was before stepPhases: the steps as
// a list of refSteps (one reflective decode per element), then refPhases.
// FuzzStepPhases holds stepPhases to it.
type refResult struct {
	OK    bool            `json:"ok"`
	Value json.RawMessage `json:"value"`
	Steps []refStep       `json:"steps,omitempty"`
}

type refStep struct {
	name string
	took time.Duration
}

func (c *refStep) UnmarshalJSON(b []byte) error {
	var pair []json.RawMessage
	if json.Unmarshal(b, &pair) != nil || len(pair) != 2 {
		return nil
	}
	var name string
	if json.Unmarshal(pair[0], &name) != nil || strings.ContainsAny(string(pair[0]), `\`) {
		return nil
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(pair[1])), 10, 64)
	if err != nil || ns < 0 {
		return nil
	}
	c.name, c.took = name, time.Duration(ns)
	return nil
}

func refPhases(steps []refStep) []Phase {
	out := []Phase{}
	at := map[string]int{}
	for _, s := range steps {
		if _, ok := childSteps[s.name]; !ok {
			continue
		}
		if i, ok := at[s.name]; ok {
			out[i].Took = s.took
			continue
		}
		if len(out) < maxChildSteps {
			at[s.name] = len(out)
			out = append(out, Phase{Name: "child." + s.name, Took: s.took})
		}
	}
	return out
}

// FuzzStepPhases: whatever a handler leaves in result.json's steps, the
// steps decode to what a reflective decode of each [name, ns] pair gives
// (same error or none, same phases, same value), and nothing panics.
func FuzzStepPhases(f *testing.F) {
	for _, s := range []string{
		`[["reseed", 1500], ["bad name", 1], ["handler", 9], ["handler", 2000000]]`,
		`[["x\r\nSet-Cookie", 1], [3, 4], ["neg", -1], "junk", ["db", 7]]`,
		`[["reseed", 1.5e3], ["re\"seed", 1], [ "stdio" , 1e3 ], [["handler"], 5]]`,
		`[{"handler": 5}, null, ["handler", 7, 8], ["enc\u006fde", 3], ["encode", "3"]]`,
		`[["encode", 01], ["encode", -0], ["encode", 9223372036854775808], ["step",0]]`,
		`null`, `[]`, `[ ]`, `5`, `"x"`, `{}`, `[[]]`, `[",]"]`, `["\\", ["handler", 1]]`,
		`[["handler", 1] , ["stdio",2]]`, `[["pre.reseed", 1],["pre.reseed", 2]]`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, steps string) {
		body := []byte(`{"ok": true, "value": [1, {"a": "]"}], "steps": ` + steps + `}`)
		var ref refResult
		refErr := json.Unmarshal(body, &ref)
		got, err := decodeResult(body)
		if (err == nil) != (refErr == nil) {
			t.Fatalf("steps %q: error %v, reference %v", steps, err, refErr)
		}
		if err != nil {
			return
		}
		want := refPhases(ref.Steps)
		if p := got.Steps.phases(); !reflect.DeepEqual(append([]Phase{}, p...), want) {
			t.Fatalf("steps %q: phases %v, reference %v", steps, p, want)
		}
		if string(got.Value) != string(ref.Value) || !got.OK {
			t.Fatalf("steps %q: value %s ok %v, reference %s", steps, got.Value, got.OK, ref.Value)
		}
		// The element scan on its own, on any bytes: no panic.
		var s stepPhases
		_ = s.UnmarshalJSON([]byte(steps))
	})
}

// FuzzQuickMessage: a datagram quickMessage takes is one json.Unmarshal
// decodes to the same message; every form the agents send is taken.
func FuzzQuickMessage(f *testing.F) {
	for _, s := range []string{
		`{"type":"hello","pid":12}`, `{"type":"forked","seq":1,"pid":2}`, `{"type":"exited","seq":3,"pid":4,"code":0}`,
		`{"type":"exited","seq":3,"pid":4,"signal":9}`, `{"type":"exited","seq":3,"seq":4}`, `{"type":"hello"}`,
		`{"type":"hello","pid":012}`, `{"type":"hello","pid":-1}`, `{"type":"hello","PID":1}`, `{"type":"hello", "pid":1}`,
		`{"type":"ready","pid":1}`, `{"type":"hello","pid":1}x`, `{"type":"hello","pid":99999999999999999999}`,
		`{"type":"hel\u006co"}`, `{"type":"hello","pid":1.5}`, `{"type":"hello","pid":1e3}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var quick message
		if !quickMessage(b, &quick) {
			return
		}
		var ref message
		if err := json.Unmarshal(b, &ref); err != nil {
			t.Fatalf("%q: quickMessage took what json.Unmarshal refuses: %v", b, err)
		}
		if !reflect.DeepEqual(quick, ref) {
			t.Fatalf("%q: quickMessage %+v, json.Unmarshal %+v", b, quick, ref)
		}
	})
}

// TestQuickMessageTakesTheAgentsForms: the messages of every request, as the
// agents write them, take quickMessage's way.
func TestQuickMessageTakesTheAgentsForms(t *testing.T) {
	for _, s := range []string{`{"type":"hello","pid":12}`, `{"type":"forked","seq":1,"pid":2}`,
		`{"type":"exited","seq":3,"pid":4,"code":0}`, `{"type":"exited","seq":3,"pid":4,"signal":9}`} {
		var m message
		if !quickMessage([]byte(s), &m) {
			t.Errorf("%s: not taken", s)
		}
	}
	for _, s := range []string{`{"type":"hello", "pid":12}`, `{"type":"fork_error","seq":1,"error":"x"}`, `{"type":"exited","seq":3,"seq":4}`} {
		var m message
		if quickMessage([]byte(s), &m) {
			t.Errorf("%s: taken", s)
		}
	}
}

// TestQuickEncodeIsMarshal: what quickEncode writes is json.Marshal's
// encoding, byte for byte, and it leaves to json.Marshal what it cannot.
func TestQuickEncodeIsMarshal(t *testing.T) {
	code, yes := 0, true
	for _, m := range []message{
		{Type: "fork", Seq: 12}, {Type: "run", Seq: 1}, {Type: "warm"}, {Type: "stop"}, {Type: "fork", Seq: -3},
		{Type: "go", RequestID: "r-4f1c2a9b8e7d6c5b", Dir: "/run/zygo/req/0123abcd", DeadlineMs: 29998, Function: "stats", Version: "v-3"},
		{Type: "go", RequestID: "r-1", Dir: "/d", Function: "f", Version: "v", Strict: true},
		{Type: "go", RequestID: "r-1", Dir: "/d", DeadlineMs: -1},
		{Type: "go", RequestID: "r-1", Dir: "/d", EventBytes: 7, Event: []byte(`{"a":1}`)},
		{Type: "go", RequestID: "r<1>", Function: "a&b"}, {Type: "go", Function: "é"}, {Type: "go", Version: "a\"b\\c\n"},
		{Type: "go", Script: &goScript{Tenant: "t"}}, {Type: "exited", Code: &code}, {Type: "ready", ForkSafe: &yes},
	} {
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := quickEncode(nil, &m)
		if ok && string(got) != string(want) {
			t.Errorf("%+v: quickEncode %s, json.Marshal %s", m, got, want)
		}
		plain := m.Script == nil && m.Code == nil && m.ForkSafe == nil && !strings.ContainsAny(m.RequestID+m.Function+m.Version, "<>&é\"\\\n")
		if ok != plain {
			t.Errorf("%+v: quickEncode took it: %v, want %v", m, ok, plain)
		}
	}
}

// FuzzQuickEncode: for any go message, quickEncode writes json.Marshal's
// bytes or leaves it to json.Marshal.
func FuzzQuickEncode(f *testing.F) {
	f.Add("go", "r-1", "/run/zygo/req/x", int64(30000), "stats", "v-1", false, 0)
	f.Add("fork", "", "", int64(0), "", "", false, 7)
	f.Add("go", "<&>", "\u2028", int64(-5), "\x00", "\xff", true, -1)
	f.Fuzz(func(t *testing.T, typ, id, dir string, deadline int64, fn, version string, strict bool, seq int) {
		m := message{Type: typ, Seq: seq, RequestID: id, Dir: dir, DeadlineMs: deadline, Function: fn, Version: version, Strict: strict,
			EventBytes: seq & 0xffff}
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := quickEncode(nil, &m); ok && string(got) != string(want) {
			t.Fatalf("%+v: quickEncode %s, json.Marshal %s", m, got, want)
		}
	})
}

// TestInlineEventBounds: which requests' events travel in go and which as
// event.json.
func TestInlineEventBounds(t *testing.T) {
	fork := &Process{spec: Spec{Mode: ModeFork}}
	cases := []struct {
		z    *Process
		req  Request
		want bool
	}{
		{fork, Request{Event: []byte(`{}`)}, true},
		{fork, Request{Event: bytes.Repeat([]byte(" "), maxInlineEvent)}, true},
		{fork, Request{Event: bytes.Repeat([]byte(" "), maxInlineEvent+1)}, false},
		{fork, Request{}, false}, // empty: the agent refuses it as an empty event.json
		{fork, Request{Event: []byte(`{}`), Script: &Script{Tenant: "acme", Hash: "h", Entry: "main:handler"}}, true}, // a pool's
		{&Process{spec: Spec{Mode: ModeSpawn}}, Request{Event: []byte(`{}`)}, true},
		{&Process{spec: Spec{Mode: ModeWorker}}, Request{Event: []byte(`{}`)}, false}, // Node: JSON lines
	}
	for i, c := range cases {
		if got := c.z.inlineEvent(c.req); got != c.want {
			t.Errorf("case %d (mode %v, %d bytes): inline %v, want %v", i, c.z.spec.Mode, len(c.req.Event), got, c.want)
		}
	}
	if maxInlineEvent+1024 > maxDatagram {
		t.Errorf("maxInlineEvent %d leaves less than 1 KiB of a %d-byte datagram for go's JSON", maxInlineEvent, maxDatagram)
	}
}

// TestGoFallsBackToEventFileOnEMSGSIZE: a request socket whose send buffer is
// smaller than go with its event (a host's net.core.wmem_default) gets go
// without the event, and the event as event.json, not a failed request.
func TestGoFallsBackToEventFileOnEMSGSIZE(t *testing.T) {
	local, remote := packetPair(t)
	raw, err := local.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, 4096) }); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	tmp := t.TempDir()
	dir, err := untrusted.OpenDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	event := []byte(`{"pad":"` + strings.Repeat("p", 20<<10) + `"}`)
	m := message{Type: "go", RequestID: "r-1", Dir: "/run/zygo/req/x", DeadlineMs: 1000, EventBytes: len(event), Event: event}
	if err := sendGo(packetChannel{c: local}, dir, -1, m, nil); err != nil {
		t.Fatalf("sendGo: %v", err)
	}
	buf := make([]byte, maxDatagram)
	n, _, err := unix.Recvfrom(int(remote.Fd()), buf, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got message
	if bytes.IndexByte(buf[:n], '\n') >= 0 || json.Unmarshal(buf[:n], &got) != nil || got.EventBytes != 0 || got.RequestID != "r-1" {
		t.Fatalf("go after the fallback: %q, want its JSON alone without event_bytes", buf[:n])
	}
	b, err := os.ReadFile(tmp + "/event.json")
	if err != nil || !bytes.Equal(b, event) {
		t.Fatalf("event.json: %v, %d bytes, want the event's %d", err, len(b), len(event))
	}
	if fi, err := os.Stat(tmp + "/event.json"); err != nil || fi.Mode().Perm() != 0o400 {
		t.Errorf("event.json mode: %v %v, want 0400", fi.Mode(), err)
	}
	// event.json cannot be written (here: it exists; O_EXCL): the failure is the request
	// directory's (eventFileError, which Run answers as requestDirError's 503), not a crash.
	err = sendGo(packetChannel{c: local}, dir, -1, m, nil)
	var efe *eventFileError
	if !errors.As(err, &efe) || !errors.Is(err, unix.EMSGSIZE) || !errors.Is(err, os.ErrExist) {
		t.Errorf("sendGo with event.json not writable: %v, want an eventFileError of EMSGSIZE and EEXIST", err)
	}
	if !errors.Is(requestDirError(efe.write), errdefs.ErrUnavailable) {
		t.Errorf("requestDirError(%v) is not ErrUnavailable", efe.write)
	}
	// A go without an inline event is sent as it is: an error stays the send's.
	local.Close()
	if err := sendGo(packetChannel{c: local}, dir, -1, message{Type: "go", Event: []byte("{}"), EventBytes: 2}, nil); err == nil {
		t.Error("sendGo on a closed socket: no error")
	}
}

// FuzzGoFraming: whatever the go message's strings (quickEncode's path or
// json.Marshal's, neither writing a raw newline) and whatever the event's
// bytes, a go with an inline event is one datagram whose first newline ends
// the JSON, which decodes to the message with event_bytes, and the rest is
// the event, newlines and all.
func FuzzGoFraming(f *testing.F) {
	// quickEncode's path and json.Marshal's (a newline, HTML characters and non-ASCII in
	// the strings), with newlines in and out of the event's strings.
	event := []byte("{\"s\": \"a\\nb\",\n \"n\": [1,\n2]}\n")
	f.Add("r-1", "stats", "v-1", event)
	f.Add("r-1", "f\n<é>", "v\"\\", event)
	f.Add("r-1", "stats", "v-1", []byte(`{"a":"\n"}`))
	f.Add("r<\n>", "é\u2028", "\"\\", []byte("\n\n\x00\xff"))
	local, remote := packetPair(f)
	buf := make([]byte, maxDatagram+1)
	f.Fuzz(func(t *testing.T, id, fn, version string, event []byte) {
		if len(event) == 0 || len(event) > maxInlineEvent || len(id)+len(fn)+len(version) > 1024 ||
			!utf8.ValidString(id) || !utf8.ValidString(fn) || !utf8.ValidString(version) { // JSON carries invalid UTF-8 as U+FFFD: not framing
			t.Skip()
		}
		m := message{Type: "go", RequestID: id, Dir: "/run/zygo/req/x", DeadlineMs: 1, Function: fn, Version: version,
			EventBytes: len(event), Event: event}
		if err := send(local, m, nil); err != nil {
			t.Fatal(err)
		}
		n, _, err := unix.Recvfrom(int(remote.Fd()), buf, 0)
		if err != nil {
			t.Fatal(err)
		}
		head, payload, _ := bytes.Cut(buf[:n], []byte("\n"))
		var got message
		if err := json.Unmarshal(head, &got); err != nil {
			t.Fatalf("the JSON before the first newline: %v (%q)", err, head)
		}
		want := m
		want.Event = nil
		got.Event = nil
		if !reflect.DeepEqual(got, want) || !bytes.Equal(payload, event) {
			t.Fatalf("decoded %+v and %q, want %+v and %q", got, payload, want, event)
		}
	})
}

// packetPair is socketPair(SOCK_SEQPACKET) for a test, both ends closed when it ends.
func packetPair(tb testing.TB) (sockConn, *os.File) {
	tb.Helper()
	local, remote, err := socketPair(unix.SOCK_SEQPACKET)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { local.Close(); remote.Close() })
	return local, remote
}
