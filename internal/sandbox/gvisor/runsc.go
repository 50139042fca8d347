package gvisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
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

// runsc runs one short runsc command and returns its combined output. The error carries the
// output's last line.
func (b *Backend) runsc(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, b.cfg.Runsc, append(b.globalFlags(), args...)...)
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.Bytes(), fmt.Errorf("runsc %s: %w: %s", args[0], err, lastLine(out.Bytes()))
	}
	return out.Bytes(), nil
}

// runscDetached runs run or restore --detach. Its stdio is logFile (owned by the caller),
// because the sandbox inherits it: a pipe would never reach EOF.
func (b *Backend) runscDetached(ctx context.Context, logFile *os.File, args ...string) error {
	cmd := exec.CommandContext(ctx, b.cfg.Runsc, append(b.globalFlags(), args...)...)
	cmd.WaitDelay = 5 * time.Second
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Run(); err != nil {
		tail, _ := os.ReadFile(logFile.Name())
		return fmt.Errorf("runsc %s: %w: %s", args[0], err, lastLine(tail))
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

// deleteContainer kills and deletes the container (delete --force kills the sandbox and its
// gofer); an absent one is not an error.
func (b *Backend) deleteContainer(ctx context.Context, id string) error {
	_, err := b.runsc(ctx, "delete", "--force", id)
	if err == nil {
		return nil
	}
	if _, serr := b.state(ctx, id); errors.Is(serr, errdefs.ErrNotFound) {
		return nil
	}
	return err
}
