package gvisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// globalFlags are passed to every runsc command. The create-time ones (platform, network,
// overlay, host-uds) are recorded by runsc with the container, but passing them everywhere
// keeps restore identical to create. runsc manages cgroups (no --ignore-cgroups): each
// bundle names its instance's group and limits (limits.go).
func (b *Backend) globalFlags() []string {
	f := []string{
		"--root=" + b.runscRoot,
		"--platform=" + b.cfg.Platform,
		"--network=none",
		"--overlay2=root:memory", // the root's writes live in memory and in every checkpoint
		"--host-uds=open",        // the guest dials out to the host's socket; it never listens on one
	}
	return append(f, b.cfg.ExtraFlags...)
}

// maxRunscOutput bounds what the daemon keeps of one runsc command's output (stdout and
// stderr together). runsc's own answers (state, list) are a few KiB; `runsc exec` runs a
// program inside the sandbox, whose output the sandbox controls.
const maxRunscOutput = 1 << 20

// runsc runs one short runsc command and returns its combined output, of which it keeps at
// most maxRunscOutput bytes (the rest is discarded, and the error says so). The error carries
// the output's last line.
func (b *Backend) runsc(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, b.cfg.Runsc, append(b.globalFlags(), args...)...)
	cmd.WaitDelay = 5 * time.Second
	out := &capBuffer{max: maxRunscOutput}
	cmd.Stdout, cmd.Stderr = out, out
	err := cmd.Run()
	if err == nil && out.dropped > 0 {
		err = fmt.Errorf("output longer than %d bytes (%d dropped)", maxRunscOutput, out.dropped)
	}
	if err != nil {
		return out.Bytes(), fmt.Errorf("runsc %s: %w: %s", args[0], err, lastLine(out.Bytes()))
	}
	return out.Bytes(), nil
}

// runscStdout runs one runsc command and returns at most limit bytes of its stdout. A command
// that writes more is killed at once and the call fails: it is for answers of a known small
// size read from inside a sandbox (whose programs may write without end). stderr is kept up to
// 4 KiB for the error.
func (b *Backend) runscStdout(ctx context.Context, limit int, args ...string) ([]byte, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.cfg.Runsc, append(b.globalFlags(), args...)...)
	cmd.WaitDelay = 5 * time.Second
	stderr := &capBuffer{max: 4 << 10}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("runsc %s: %w", args[0], err)
	}
	out, rerr := io.ReadAll(io.LimitReader(stdout, int64(limit)+1))
	if len(out) > limit {
		cancel()           // kills runsc
		_ = stdout.Close() // and whatever still writes to the pipe gets EPIPE
		_ = cmd.Wait()
		return out[:limit], fmt.Errorf("runsc %s: output longer than %d bytes", args[0], limit)
	}
	if err := cmd.Wait(); err != nil {
		return out, fmt.Errorf("runsc %s: %w: %s", args[0], err, lastLine(stderr.Bytes()))
	}
	if rerr != nil {
		return out, fmt.Errorf("runsc %s: reading output: %w", args[0], rerr)
	}
	return out, nil
}

// capBuffer is an io.Writer that keeps the first max bytes and counts the rest.
type capBuffer struct {
	bytes.Buffer
	max     int
	dropped int64
}

func (c *capBuffer) Write(p []byte) (int, error) {
	keep := min(len(p), c.max-c.Len())
	if keep > 0 {
		c.Buffer.Write(p[:keep])
	}
	c.dropped += int64(len(p) - max(keep, 0))
	return len(p), nil
}

// runscDetached runs run or restore --detach. Its stdio is logFile (owned by the caller),
// because the sandbox inherits it: a pipe would never reach EOF.
func (b *Backend) runscDetached(ctx context.Context, logFile *os.File, args ...string) error {
	cmd := exec.CommandContext(ctx, b.cfg.Runsc, append(b.globalFlags(), args...)...)
	cmd.WaitDelay = 5 * time.Second
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Run(); err != nil {
		// The log is the sandbox's stdio too: read only its tail.
		return fmt.Errorf("runsc %s: %w: %s", args[0], err, lastLogLine(logFile.Name()))
	}
	return nil
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// containerState is the part of `runsc state` we read.
type containerState struct {
	ID     string `json:"id"`
	Status string `json:"status"` // "created", "running", "stopped"
	PID    int    `json:"pid"`
}

// state returns the container's state, or an error wrapping errdefs.ErrNotFound.
func (b *Backend) state(ctx context.Context, id string) (containerState, error) {
	var st containerState
	out, err := b.runsc(ctx, "state", id)
	if err != nil {
		if strings.Contains(string(out), "does not exist") || strings.Contains(string(out), "not found") {
			return st, fmt.Errorf("container %s: %w", id, errdefs.ErrNotFound)
		}
		return st, err
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return st, fmt.Errorf("decoding runsc state: %w", err)
	}
	return st, nil
}

// list returns every container under our runsc root.
func (b *Backend) list(ctx context.Context) ([]containerState, error) {
	out, err := b.runsc(ctx, "list", "--format=json")
	if err != nil {
		return nil, err
	}
	var sts []containerState
	if err := json.Unmarshal(bytes.TrimSpace(out), &sts); err != nil {
		return nil, fmt.Errorf("decoding runsc list: %w", err)
	}
	return sts, nil
}

// deleteWait bounds each `runsc delete --force` of deleteContainer: runsc talks to the
// sandbox first, and a sandbox that stopped answering (frozen, SIGSTOPped) would hold it.
const deleteWait = 10 * time.Second

// deleteContainer kills and deletes the container (delete --force kills the sandbox and its
// gofer); an absent one is not an error. When the delete fails or takes longer than
// deleteWait (the sandbox does not answer), the processes of the instance's cgroup are
// SIGKILLed, which needs no answer from them, and the delete is tried once more, so it
// returns within about twice deleteWait whatever the sandbox does; what still fails wraps
// errdefs.ErrUnavailable.
func (b *Backend) deleteContainer(ctx context.Context, id string) error {
	del := func() error {
		dctx, cancel := context.WithTimeout(ctx, deleteWait)
		defer cancel()
		_, err := b.runsc(dctx, "delete", "--force", id)
		return err
	}
	gone := func() bool {
		sctx, cancel := context.WithTimeout(ctx, deleteWait)
		defer cancel()
		_, serr := b.state(sctx, id)
		return errors.Is(serr, errdefs.ErrNotFound)
	}
	err := del()
	if err == nil || gone() {
		return nil
	}
	if n := b.killCgroup(id); n > 0 {
		b.log.Warn("runsc delete did not end the sandbox: killed its processes", "engine_id", id, "processes", n, "err", err)
	}
	if err = del(); err == nil || gone() {
		return nil
	}
	return fmt.Errorf("the sandbox's engine did not end, even after SIGKILL of its cgroup: %w: %w", errdefs.ErrUnavailable, err)
}

// killCgroup SIGKILLs every process in instance id's cgroup (a stopped one too) and returns
// how many it signalled.
func (b *Backend) killCgroup(id string) int {
	n := 0
	for _, d := range b.cgroupDirs(id) {
		data, err := os.ReadFile(filepath.Join(d, "cgroup.procs")) // a kernel file: small, never blocks
		if err != nil {
			continue
		}
		for f := range strings.FieldsSeq(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 && syscall.Kill(pid, syscall.SIGKILL) == nil {
				n++
			}
		}
	}
	return n
}
