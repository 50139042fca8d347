package api

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/sandbox"
)

// stallSandboxes exports an endless image (and says when the export's lease is released), and
// imports by reading its body to the end.
type stallSandboxes struct {
	Sandboxes
	released chan struct{}
	imported chan error
}

func (f *stallSandboxes) ExportCheckpoint(context.Context, string) (*sandbox.ImageExport, error) {
	write := func(ctx context.Context, w io.Writer) error {
		buf := make([]byte, 64<<10)
		for ctx.Err() == nil {
			if _, err := w.Write(buf); err != nil {
				return err
			}
		}
		return ctx.Err()
	}
	cp := sandbox.CheckpointRecord{ID: "cp-0000000000000001"}
	return sandbox.NewImageExport(cp, 1<<40, strings.Repeat("0", 64), write, func() { close(f.released) }), nil
}

func (f *stallSandboxes) ImportCheckpoint(_ context.Context, r io.Reader, _ sandbox.ImportOptions) (sandbox.CheckpointRecord, error) {
	_, err := io.Copy(io.Discard, r)
	f.imported <- err
	return sandbox.CheckpointRecord{}, err
}

// TestImageStall: an export whose reader stops reading, and an import whose body stops
// coming, end once no byte moved for the server's stall timeout: the export's lease on its
// checkpoint is released, the import answers that its body stalled.
func TestImageStall(t *testing.T) {
	f := &stallSandboxes{released: make(chan struct{}), imported: make(chan error, 1)}
	srv := NewServer(nil, nil, nil, slog.New(slog.DiscardHandler), "test").WithSandboxes(f, nil)
	srv.stall = 300 * time.Millisecond
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	addr := strings.TrimPrefix(ts.URL, "http://")

	// A reader that reads the headers and then nothing.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4 << 10)
	fmt.Fprintf(conn, "GET /v1/checkpoints/cp-0000000000000001/image HTTP/1.1\r\nHost: x\r\n\r\n")
	select {
	case <-f.released:
	case <-time.After(20 * time.Second):
		t.Fatal("the export of a reader that stopped reading still holds its lease after 20 s (stall timeout 300 ms)")
	}

	// A body that sends part and then nothing.
	ic, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ic.Close()
	fmt.Fprintf(ic, "POST /v1/checkpoints/import?sha256=%s HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\npartial",
		strings.Repeat("0", 64))
	select {
	case err := <-f.imported:
		if err == nil {
			t.Fatal("the import read a whole body that never came")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the import of a stalled body still reads after 20 s (stall timeout 300 ms)")
	}
	_ = ic.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(ic), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusGatewayTimeout || !strings.Contains(string(body), "stalled") {
		t.Errorf("stalled import answered %d %s, want 504 saying the body stalled", res.StatusCode, body)
	}
}
