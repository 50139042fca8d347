package gvisor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFailedStartReadsOnlyTheLogsTail: runsc.log is the sandbox's stdio, so
// it can be as large as the sandbox makes it. A failed runsc start reports
// the log's last line from its last 4 KiB, never reading the whole file (a
// 1 TiB sparse log here; os.ReadFile of it would try to allocate 1 TiB).
func TestFailedStartReadsOnlyTheLogsTail(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "runsc.log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const last = "the last line of a huge log"
	if _, err := f.WriteAt([]byte("\n"+last+"\n"), 1<<40); err != nil {
		t.Fatal(err)
	}
	b := &Backend{cfg: Config{Runsc: "/bin/false"}}
	err = b.runscDetached(context.Background(), f, "run")
	if err == nil || !strings.Contains(err.Error(), last) {
		t.Fatalf("err = %v, want the log's last line", err)
	}
}
