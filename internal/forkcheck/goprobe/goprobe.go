// Package goprobe is the Go probe of `zygo check sandboxes`. It lives in zygo-guest, the static
// binary that is already inside every sandbox (at /zygo/guest), as the hidden subcommand
// `zygo-guest probe`, so the check needs no Go toolchain or extra binary in the sandbox:
//
//	zygo-guest probe live DIR    draw once from every generator, write DIR/go.ready, wait for
//	                             DIR/go, draw again and write DIR/go.json ({"rows": {...}})
//	zygo-guest probe fresh       a process started after the copy: one JSON object of draws
//
// It imports only the standard library, so it adds little to zygo-guest.
package goprobe

import (
	cryptorand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	mathrand "math/rand"
	"os"
	"path/filepath"
	"time"
)

// Trigger is the file in DIR whose appearance makes a live probe report.
const Trigger = "go"

// Draws returns one value from each Go generator the check compares.
func Draws() (map[string]any, error) {
	b := make([]byte, 16)
	if _, err := cryptorand.Read(b); err != nil {
		return nil, fmt.Errorf("reading crypto/rand: %w", err)
	}
	return map[string]any{
		// As hex: JSON numbers above 2^53 would lose digits in a float64.
		"math/rand rand.Int63()":     fmt.Sprintf("%016x", mathrand.Int63()),
		"crypto/rand.Read(16 bytes)": hex.EncodeToString(b),
	}, nil
}

// Main runs `zygo-guest probe ARGS` and returns the exit status.
func Main(args []string, stdout, stderr io.Writer) int {
	var err error
	switch {
	case len(args) == 1 && args[0] == "fresh":
		err = fresh(stdout)
	case len(args) == 2 && args[0] == "live":
		err = live(args[1])
	default:
		err = fmt.Errorf("usage: zygo-guest probe fresh | zygo-guest probe live DIR")
	}
	if err != nil {
		fmt.Fprintln(stderr, "zygo-guest probe:", err)
		return 1
	}
	return 0
}

func fresh(w io.Writer) error {
	rows, err := Draws()
	if err != nil {
		return err
	}
	rows["pid"] = os.Getpid()
	return json.NewEncoder(w).Encode(rows)
}

func live(dir string) error {
	if _, err := Draws(); err != nil { // make every generator's state live
		return err
	}
	if err := publish(filepath.Join(dir, "go.ready"), map[string]any{"pid": os.Getpid()}); err != nil {
		return err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, Trigger)); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	rows, err := Draws()
	if err != nil {
		return err
	}
	rows["pid"] = os.Getpid()
	return publish(filepath.Join(dir, "go.json"), map[string]any{"rows": rows})
}

// publish writes v as JSON to path whole: a temp file, then a rename.
func publish(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path+".tmp", b, 0o644); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}
