package bench

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/zygo-run/zygo/internal/zygote"
)

// phaseLog is a slog handler that keeps the per-request phases the
// function manager logs at debug level ("request done"), per function: the
// profile of the warm path that the report prints beside the latencies.
type phaseLog struct {
	mu     sync.Mutex
	phases map[string]map[string][]time.Duration // function → phase → samples
}

func newPhaseLog() *phaseLog { return &phaseLog{phases: map[string]map[string][]time.Duration{}} }

func (p *phaseLog) Enabled(_ context.Context, l slog.Level) bool { return true }
func (p *phaseLog) WithAttrs([]slog.Attr) slog.Handler           { return p }
func (p *phaseLog) WithGroup(string) slog.Handler                { return p }

func (p *phaseLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "request done" {
		return nil
	}
	var fn string
	var phases []zygote.Phase
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "function":
			fn = a.Value.String()
		case "phases":
			phases, _ = a.Value.Any().([]zygote.Phase)
		}
		return true
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.phases[fn] == nil {
		p.phases[fn] = map[string][]time.Duration{}
	}
	for _, ph := range phases {
		p.phases[fn][ph.Name] = append(p.phases[fn][ph.Name], ph.Took)
	}
	return nil
}

// reset forgets what was collected for fn.
func (p *phaseLog) reset(fn string) {
	p.mu.Lock()
	delete(p.phases, fn)
	p.mu.Unlock()
}

// medians returns fn's phases in request order with their median duration.
func (p *phaseLog) medians(fn string) []zygote.Phase {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []zygote.Phase
	for _, name := range []string{"dir", "fork+hello", "before_go", "run", "collect"} {
		s := append([]time.Duration(nil), p.phases[fn][name]...)
		if len(s) == 0 {
			continue
		}
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		out = append(out, zygote.Phase{Name: name, Took: s[len(s)/2]})
	}
	return out
}
