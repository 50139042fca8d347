package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/zygo-run/zygo/sdk/go/zygo"
)

func newInvokeCmd(g *globals) *cobra.Command {
	var data string
	var repeat, concurrency int
	cmd := &cobra.Command{
		Use:   "invoke NAME [--data JSON | --data @file | --data -]",
		Short: "Invoke a function and print its JSON result",
		Long: "Invoke a function and print the handler's return value as JSON on stdout.\n" +
			"On failure the error (type, message, traceback) goes to stderr and the exit status is 1.\n" +
			"--repeat N invokes N times (--concurrency C at once), prints one result per line and\n" +
			"latency percentiles on stderr.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			event, err := readData(data, cmd.InOrStdin())
			if err != nil {
				return err
			}
			if repeat < 1 || concurrency < 1 {
				return errors.New("--repeat and --concurrency must be at least 1")
			}
			c := g.client()
			if repeat == 1 {
				res, err := c.Invoke(cmd.Context(), args[0], event)
				if err != nil {
					return describeInvokeError(err)
				}
				fmt.Fprintln(cmd.OutOrStdout(), string(res.Value))
				return nil
			}
			return invokeMany(cmd, c, args[0], event, repeat, concurrency)
		},
	}
	cmd.Flags().StringVarP(&data, "data", "d", "{}", "the event: JSON text, @FILE, or - for stdin")
	cmd.Flags().IntVarP(&repeat, "repeat", "n", 1, "invoke this many times")
	cmd.Flags().IntVarP(&concurrency, "concurrency", "c", 1, "requests in flight at once with --repeat")
	return cmd
}

func readData(data string, stdin io.Reader) ([]byte, error) {
	switch {
	case data == "-":
		return io.ReadAll(stdin)
	case strings.HasPrefix(data, "@"):
		b, err := os.ReadFile(data[1:])
		if err != nil {
			return nil, fmt.Errorf("--data: %w", err)
		}
		return b, nil
	}
	return []byte(data), nil
}

func describeInvokeError(err error) error {
	var ae *zygo.Error
	if errors.As(err, &ae) && !zygo.IsUnauthenticated(err) { // a 401 keeps its type: run explains it
		b := ae.ErrorBody
		msg := b.Text()
		if b.Type != "" && !strings.HasPrefix(msg, b.Type) {
			msg = b.Type + ": " + msg
		}
		if b.RequestID != "" {
			msg += " (request " + b.RequestID + ")"
		}
		if b.Traceback != "" {
			msg += "\n" + strings.TrimRight(b.Traceback, "\n")
		}
		return errors.New(msg)
	}
	return err
}

func invokeMany(cmd *cobra.Command, c *zygo.Client, name string, event []byte, n, conc int) error {
	type out struct {
		value   string
		err     error
		refused bool // 429: the function was at its concurrency with its queue full
		took    time.Duration
	}
	if _, err := c.Status(cmd.Context()); err != nil {
		return err
	}
	results := make([]out, n)
	next := make(chan int)
	var wg sync.WaitGroup
	t0 := time.Now()
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				res, err := c.Invoke(cmd.Context(), name, event)
				if err != nil {
					results[i] = out{err: describeInvokeError(err), refused: zygo.IsTooManyRequests(err)}
					continue
				}
				results[i] = out{value: string(res.Value), took: res.Elapsed}
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	wall := time.Since(t0)
	var lat []time.Duration
	failed, refused := 0, 0
	var lastRefusal error
	for _, r := range results {
		switch {
		case r.refused:
			refused++
			lastRefusal = r.err
			continue
		case r.err != nil:
			failed++
			fmt.Fprintln(cmd.ErrOrStderr(), "error:", r.err)
			continue
		}
		fmt.Fprintln(cmd.OutOrStdout(), r.value)
		lat = append(lat, r.took)
	}
	if refused > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "refused (429) %d times: %v\n", refused, lastRefusal)
	}
	summary := fmt.Sprintf("%d requests, %d failed, %d refused (429), concurrency %d", n, failed, refused, conc)
	if len(lat) > 0 {
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		summary += fmt.Sprintf(": p50 %.2f ms, p99 %.2f ms, %.1f req/s",
			ms(percentile(lat, 50)), ms(percentile(lat, 99)), float64(len(lat))/wall.Seconds())
	}
	fmt.Fprintln(cmd.ErrOrStderr(), summary)
	if failed+refused > 0 {
		return fmt.Errorf("%d of %d requests failed and %d were refused (429)", failed, n, refused)
	}
	return nil
}

func percentile(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	if i < 1 {
		i = 1
	}
	return sorted[i-1]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
