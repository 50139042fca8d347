package controller

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// tarGzOf writes a gzip'd tar of the given headers, each followed by Size zero bytes.
func tarGzOf(t *testing.T, hs ...tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz, err := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(gz)
	zero := make([]byte, 1<<20)
	for _, h := range hs {
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		for left := h.Size; left > 0; {
			n := min(left, int64(len(zero)))
			if _, err := tw.Write(zero[:n]); err != nil {
				t.Fatal(err)
			}
			left -= n
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A URL archive far smaller than wire.MaxBundleBytes that unpacks past the daemon's bound
// (the decompression bomb of the attack) is refused at the entry that crosses it, before its
// data is read; so is an archive of too many entries. Exactly at the bounds is accepted.
func TestUntarBounds(t *testing.T) {
	reg := func(name string, size int64) tar.Header {
		return tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: size}
	}
	t.Run("unpacked total over the bound", func(t *testing.T) {
		b := tarGzOf(t, reg("a", 1), reg("bomb", maxUnpackedBytes))
		files, err := untar(b)
		if err == nil {
			t.Fatalf("untar of a %d-byte archive unpacking to %d bytes: no error, %d files", len(b), maxUnpackedBytes+1, len(files))
		}
		if !errors.Is(err, errSource) || !strings.Contains(err.Error(), "spec.source.url") ||
			!strings.Contains(err.Error(), "more than 256 MiB") || !strings.Contains(err.Error(), `"bomb"`) {
			t.Errorf("error %q: want errSource naming spec.source.url, the 256 MiB bound and the entry", err)
		}
	})
	t.Run("unpacked total exactly the bound", func(t *testing.T) {
		files, err := untar(tarGzOf(t, reg("a", 1), reg("b", maxUnpackedBytes-1)))
		if err != nil || len(files["a"])+len(files["b"]) != maxUnpackedBytes {
			t.Fatalf("untar at exactly the bound: err %v", err)
		}
	})
	t.Run("too many entries", func(t *testing.T) {
		hs := make([]tar.Header, maxArchiveFiles+1)
		for i := range hs {
			hs[i] = tar.Header{Typeflag: tar.TypeDir, Name: "d" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + "/", Mode: 0o755}
		}
		_, err := untar(tarGzOf(t, hs...))
		if err == nil || !errors.Is(err, errSource) || !strings.Contains(err.Error(), "more than 10000 entries") {
			t.Fatalf("untar of %d entries: err %v, want the entry bound named", len(hs), err)
		}
		if _, err := untar(tarGzOf(t, hs[:maxArchiveFiles]...)); err != nil {
			t.Fatalf("untar of exactly %d entries: %v", maxArchiveFiles, err)
		}
	})
}

// A URL that accepts the connection and never answers fails after the fetch client's header
// timeout, naming spec.source.url, instead of holding the Function worker for fetchTimeout.
func TestFetchArchiveHungURL(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // accept, read nothing, answer nothing; close them all once ln is closed
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	done := make(chan error, 1)
	go func() {
		_, err := fetchArchive(context.Background(), newFetchClient(300*time.Millisecond, allowLoopback), "http://"+ln.Addr().String()+"/x.tgz", strings.Repeat("0", 64))
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !errors.Is(err, errSource) || !strings.Contains(err.Error(), "spec.source.url") {
			t.Fatalf("fetch of a hung URL: err %v, want errSource naming spec.source.url", err)
		}
		t.Logf("hung URL: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("fetch of a hung URL still waiting after 20s with a 300ms header timeout")
	}
	if defaultFetchClient.Transport.(*http.Transport).ResponseHeaderTimeout != fetchHeaderTimeout {
		t.Errorf("the default fetch client has no header timeout")
	}
}
