package goprobe

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestFresh(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main([]string{"fresh"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rows map[string]any
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
		t.Fatalf("%q: %v", out.String(), err)
	}
	for _, k := range []string{"math/rand rand.Int63()", "crypto/rand.Read(16 bytes)", "pid"} {
		if _, ok := rows[k]; !ok {
			t.Errorf("no %q in %v", k, rows)
		}
	}
	if s, _ := rows["math/rand rand.Int63()"].(string); len(s) != 16 {
		t.Errorf("math/rand value %v: want 16 hex digits (a JSON number would lose digits)", rows["math/rand rand.Int63()"])
	}
}

func TestLive(t *testing.T) {
	dir := t.TempDir()
	done := make(chan int, 1)
	go func() { done <- Main([]string{"live", dir}, nil, os.Stderr) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.ready")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("go.ready never appeared")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := os.WriteFile(filepath.Join(dir, Trigger), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := <-done; code != 0 {
		t.Fatalf("live exited %d", code)
	}
	var res struct{ Rows map[string]any }
	b, _ := os.ReadFile(filepath.Join(dir, "go.json"))
	if err := json.Unmarshal(b, &res); err != nil || res.Rows["crypto/rand.Read(16 bytes)"] == nil {
		t.Fatalf("go.json %q: %v", b, err)
	}
}

func TestUsage(t *testing.T) {
	var errb bytes.Buffer
	if code := Main([]string{"nope"}, nil, &errb); code == 0 || !bytes.Contains(errb.Bytes(), []byte("usage")) {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
}
