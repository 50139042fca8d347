// Command gowatch is the Go program of TestGenerationWatchers: a long-lived process that owns a
// generator, reseeds it through sdk/go/zygo/generation in every new copy, and answers each
// line on stdin (the generation it expects, or "none") with one JSON report on stdout.
package main

import (
	"bufio"
	"context"
	cryptorand "crypto/rand"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/zygo-run/zygo/sdk/go/zygo/generation"
)

func main() {
	var mu sync.Mutex // guards rng and calls
	rng := rand.New(rand.NewChaCha8(generation.Seed()))
	var calls []string
	w := generation.New(generation.Options{})
	w.OnNew(func(ev generation.Event) {
		mu.Lock()
		defer mu.Unlock()
		rng = rand.New(rand.NewChaCha8(generation.Seed()))
		calls = append(calls, ev.Generation)
	})
	go w.Run(context.Background())
	rng.Uint64() // the generator's state is memory at the checkpoint
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		want := strings.TrimSpace(in.Text())
		seen := func() bool { mu.Lock(); defer mu.Unlock(); return slices.Contains(calls, want) }
		// The watcher, not Check, must call back: wait for it, then a little longer so that a
		// second call would show.
		for deadline := time.Now().Add(3 * time.Second); want != "none" && !seen() && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(300 * time.Millisecond)
		mu.Lock()
		var kernel [16]byte
		_, _ = cryptorand.Read(kernel[:])
		b, _ := json.Marshal(map[string]any{"calls": calls, "rows": map[string]string{
			"a generator the process owns (math/rand/v2 ChaCha8)":  fmt.Sprint(rng.Uint64()),
			"math/rand/v2 rand.Uint64() (the runtime's generator)": fmt.Sprint(rand.Uint64()),
			"crypto/rand.Read(16 bytes)":                           fmt.Sprintf("%x", kernel),
		}})
		mu.Unlock()
		fmt.Println(string(b))
	}
}
