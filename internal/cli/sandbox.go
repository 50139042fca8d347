package cli

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"mvdan.cc/sh/v3/syntax"

	"github.com/zygo-run/zygo/sdk/go/wire"
)

// newSandboxCmd is `zygo sandbox`: long-lived gVisor sandboxes that can be checkpointed,
// forked N ways and rolled back. Its subcommands live in sandbox*.go.
func newSandboxCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "sandbox",
		Aliases: []string{"sb"},
		Short:   "Long-lived gVisor sandboxes: create, exec, run-code, files, checkpoint, fork, rollback",
		Long: "A sandbox is a gVisor container with zygo-guest as PID 1, a read-only root and writes kept in\n" +
			"memory, so its files and processes are part of every checkpoint. Fork and rollback restore a\n" +
			"checkpoint and reseal every copy (new generation, identity, tokens) before it can be used.\n" +
			"ID is a sandbox id or name; CHECKPOINT is a checkpoint id or tag.",
	}
	cmd.AddCommand(newSandboxCreateCmd(g), newSandboxLsCmd(g), newSandboxGetCmd(g), newSandboxRmCmd(g), newSandboxGenerationCmd(g),
		newSandboxExecCmd(g), newSandboxRunCodeCmd(g), newSandboxFilesCmd(g),
		newSandboxCheckpointCmd(g), newSandboxCheckpointsCmd(g), newSandboxForkCmd(g), newSandboxRollbackCmd(g),
		newSandboxServicesCmd(g), newSandboxPortCmd(g), newSandboxPauseCmd(g), newSandboxResumeCmd(g), newSandboxTimeoutCmd(g),
		newSandboxRestoreCmd(g), newSandboxTemplatesCmd(g), newSandboxTokenCmd(g))
	return cmd
}

func newSandboxCreateCmd(g *globals) *cobra.Command {
	var body wire.CreateSandboxBody
	var services, onFork, restart []string
	var memory, netMode string
	var allow, deny []string
	var timeout time.Duration
	var out *Output
	cmd := &cobra.Command{
		Use:   "create [--name NAME] [--template NAME | --rootfs DIR] [--timeout DURATION [--on-timeout kill|pause]] [--service NAME=CMD]... [--on-fork NAME=POLICY]... [--restart NAME=POLICY]... [--env KEY=VALUE]... [--secret NAME]... [--memory MIB] [--pids N] [--cpus N] [--network none|egress] [--allow CIDR]... [--deny CIDR]...",
		Short: "Start a sandbox and print its id",
		Long: "Start a sandbox and print its id once its guest agent answers.\n" +
			"--service NAME=CMD starts CMD (run by /bin/sh -c) at boot and keeps it running.\n" +
			"--on-fork NAME=restart|keep|signal[:SIGNAL] says what each fork or rollback does to it\n" +
			"(default keep; signal defaults to SIGHUP, sent after the new generation is published).\n" +
			"--restart NAME=on-failure|always|no says when a service whose process ended is started again\n" +
			"(default on-failure: a non-zero exit or a signal; after 100 ms, doubled each time up to 30 s).\n" +
			"--secret NAME (set first with `zygo secret set NAME`) is written to /run/secrets/NAME (0400)\n" +
			"at create, and again with its current value in every fork child and rollback.\n" +
			"--network egress (the default) gives the sandbox an address of its own and NAT to the outside;\n" +
			"every fork child and rollback gets its own address and MAC. --allow CIDR limits it to those\n" +
			"ranges, --deny CIDR refuses ranges; the host, other sandboxes and 169.254.0.0/16 never answer.\n" +
			"--template NAME creates it from a template (zygo sandbox templates; base has the user \"user\",\n" +
			"/home/user, Python 3 and Node). --timeout 10m removes it (or, with --on-timeout pause, pauses it)\n" +
			"10 minutes after it starts; `zygo sandbox timeout ID DURATION` moves that.\n" +
			limitsHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if timeout < 0 {
				return usagef("--timeout %s: must not be negative", timeout)
			}
			body.TimeoutMS = timeout.Milliseconds()
			mib, err := parseMiB(memory)
			if err != nil {
				return fmt.Errorf("--memory: %w", err)
			}
			body.MemoryMiB = mib
			if math.IsNaN(body.CPUs) || math.IsInf(body.CPUs, 0) || body.CPUs < 0 {
				return fmt.Errorf("--cpus %v: want a number of cores such as 1.5 (0: no quota)", body.CPUs)
			}
			svcs, err := parseServices(services, onFork, restart)
			if err != nil {
				return err
			}
			body.Services = append(body.Services, svcs...)
			if body.RootfsDir != "" {
				abs, err := rootfsDir(body.RootfsDir)
				if err != nil {
					return err
				}
				body.RootfsDir = abs
			}
			if netMode != "" || len(allow) > 0 || len(deny) > 0 {
				body.Network = &wire.SandboxNetwork{Mode: netMode, Allow: allow, Deny: deny}
			}
			rec, err := g.client().CreateSandbox(cmd.Context(), body)
			if err != nil {
				return nameFlags(err, createFlags)
			}
			return out.print(cmd, rec, func(w io.Writer) { fmt.Fprintln(w, rec.ID) }, nil)
		},
	}
	out = addOutput(cmd, singleCmd)
	cmd.Flags().StringVar(&body.Name, "name", "", "a unique name (default: the id)")
	cmd.Flags().StringVar(&body.RootfsDir, "rootfs", "", "a directory to use, read-only, as the root instead of the host's /usr")
	cmd.Flags().StringVar(&body.Template, "template", "", "a template's name (zygo sandbox templates), instead of --rootfs")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "end the sandbox this long after it starts, e.g. 10m (default: never)")
	cmd.Flags().StringVar(&body.OnTimeout, "on-timeout", "", "kill (default: removed) or pause, when --timeout passes")
	cmd.Flags().StringArrayVar(&services, "service", nil, "NAME=CMD: a service started at boot (repeatable)")
	cmd.Flags().StringArrayVar(&onFork, "on-fork", nil, "NAME=restart|keep|signal[:SIGNAL]: a service's fork policy (repeatable)")
	cmd.Flags().StringArrayVar(&restart, "restart", nil, "NAME=on-failure|always|no: a service's restart policy (repeatable; default on-failure)")
	cmd.Flags().StringArrayVar(&body.Env, "env", nil, "KEY=VALUE in the environment of every exec and service (repeatable)")
	cmd.Flags().StringArrayVar(&body.Secrets, "secret", nil, "NAME: a secret written to /run/secrets/NAME, rewritten in every copy (repeatable)")
	cmd.Flags().StringVar(&memory, "memory", "", "memory limit in MiB, or with a unit: 512m, 2g (default 2048, at least 64)")
	cmd.Flags().IntVar(&body.PIDs, "pids", 0, "most processes and threads alive at once inside (0: the default, 4096; else at least 32)")
	cmd.Flags().Float64Var(&body.CPUs, "cpus", 0, "CPU quota in cores, e.g. 1.5 (default: no quota)")
	cmd.Flags().StringVar(&netMode, "network", "", "egress (default: an address of its own, NAT to the outside) or none (loopback only)")
	cmd.Flags().StringArrayVar(&allow, "allow", nil, "CIDR: the only ranges the sandbox may reach (repeatable)")
	cmd.Flags().StringArrayVar(&deny, "deny", nil, "CIDR: ranges the sandbox may not reach (repeatable)")
	return cmd
}

func rootfsDir(d string) (string, error) {
	abs, err := filepath.Abs(d)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(abs)
	if err != nil || !st.IsDir() {
		return "", fmt.Errorf("--rootfs %s: not a directory", d)
	}
	return abs, nil
}

// parseServices turns NAME=CMD flags, --on-fork NAME=POLICY and --restart NAME=POLICY flags
// into services. Errors name the flag.
// serviceArgv is how a --service CMD runs: `/bin/sh -c CMD`, or `/bin/sh -c 'exec CMD'` when
// CMD is one simple command (no operators, redirections, assignments, background or shell
// builtin; parsed with mvdan.cc/sh's POSIX parser). With exec the program replaces the shell,
// so it is the service's process itself: on_fork signals and stops reach it, not a /bin/sh
// that would die of the signal (dash does not pass signals on) and leave it orphaned. A
// compound CMD keeps its shell; it should exec its long-lived program itself (docs/sandboxes.md).
func serviceArgv(command string) []string {
	if isSimpleCommand(command) {
		return []string{"/bin/sh", "-c", "exec " + command}
	}
	return []string{"/bin/sh", "-c", command}
}

// shellBuiltins are commands exec cannot run: they exist only inside a shell.
var shellBuiltins = map[string]bool{"cd": true, "export": true, "set": true, "unset": true, "exit": true,
	"source": true, ".": true, "eval": true, "exec": true, "trap": true, "read": true, "wait": true,
	"ulimit": true, "umask": true, "alias": true, "shift": true, "return": true, "break": true,
	"continue": true, "readonly": true, "local": true, "times": true, ":": true, "command": true}

func isSimpleCommand(command string) bool {
	f, err := syntax.NewParser(syntax.Variant(syntax.LangPOSIX)).Parse(strings.NewReader(command), "")
	if err != nil || len(f.Stmts) != 1 {
		return false
	}
	st := f.Stmts[0]
	call, ok := st.Cmd.(*syntax.CallExpr)
	if !ok || st.Background || st.Coprocess || st.Negated || len(st.Redirs) > 0 || len(call.Assigns) > 0 || len(call.Args) == 0 {
		return false
	}
	first := call.Args[0].Lit() // "" unless the word is a plain literal
	return first != "" && !shellBuiltins[first]
}

// Service policies as the API spells them (wire.Service; the guest enforces them).
const (
	onForkRestart    = "restart"
	onForkSignal     = "signal"
	onForkKeep       = "keep"
	restartOnFailure = "on-failure"
	restartAlways    = "always"
	restartNo        = "no"
)

func parseServices(services, onFork, restart []string) ([]wire.Service, error) {
	var out []wire.Service
	idx := map[string]int{}
	for _, s := range services {
		name, command, ok := strings.Cut(s, "=")
		if !ok || name == "" || strings.TrimSpace(command) == "" {
			return nil, fmt.Errorf("--service %q: want NAME=CMD", s)
		}
		if strings.ContainsAny(name, "/ \t\n") {
			return nil, fmt.Errorf("--service %q: the name may not hold slashes or spaces", s)
		}
		if _, dup := idx[name]; dup {
			return nil, fmt.Errorf("--service %s given twice", name)
		}
		idx[name] = len(out)
		out = append(out, wire.Service{Name: name, Argv: serviceArgv(command), OnFork: onForkKeep})
	}
	for _, p := range onFork {
		name, policy, ok := strings.Cut(p, "=")
		i, known := idx[name]
		if !ok || !known {
			return nil, fmt.Errorf("--on-fork %q: want NAME=POLICY for a NAME given with --service", p)
		}
		pol, sig, _ := strings.Cut(policy, ":")
		switch pol {
		case onForkRestart, onForkKeep:
			if sig != "" {
				return nil, fmt.Errorf("--on-fork %q: only signal takes a :SIGNAL", p)
			}
		case onForkSignal:
			if sig != "" {
				n, err := parseSignal(sig)
				if err != nil {
					return nil, fmt.Errorf("--on-fork %q: %w", p, err)
				}
				out[i].Signal = n
			}
		default:
			return nil, fmt.Errorf("--on-fork %q: policy must be restart, keep or signal[:SIGNAL]", p)
		}
		out[i].OnFork = pol
	}
	for _, p := range restart {
		name, policy, ok := strings.Cut(p, "=")
		i, known := idx[name]
		if !ok || !known {
			return nil, fmt.Errorf("--restart %q: want NAME=POLICY for a NAME given with --service", p)
		}
		switch policy {
		case restartOnFailure, restartAlways, restartNo:
		default:
			return nil, fmt.Errorf("--restart %q: policy must be on-failure, always or no", p)
		}
		out[i].Restart = policy
	}
	return out, nil
}

// signalNames are the signals --on-fork may name, with their numbers on Linux (the sandbox's
// kernel, whatever system the CLI runs on: SIGUSR1 is 30 on macOS).
var signalNames = map[string]int{"HUP": 1, "INT": 2, "QUIT": 3, "KILL": 9, "USR1": 10, "USR2": 12, "TERM": 15}

func parseSignal(s string) (int, error) {
	if n, err := strconv.Atoi(s); err == nil && n > 0 && n < 65 {
		return n, nil
	}
	if sig, ok := signalNames[strings.TrimPrefix(strings.ToUpper(s), "SIG")]; ok {
		return sig, nil
	}
	return 0, fmt.Errorf("unknown signal %q (a number or HUP, INT, QUIT, TERM, USR1, USR2, KILL)", s)
}

func newSandboxLsCmd(g *globals) *cobra.Command {
	var out *Output
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List sandboxes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			recs, err := g.client().ListSandboxes(cmd.Context())
			if err != nil {
				return err
			}
			return out.print(cmd, recs, func(tw io.Writer) {
				fmt.Fprintln(tw, "ID\tNAME\tSTATE\tADDRESS\tPARENT\tCHECKPOINT\tGENERATION\tAGE")
				for _, r := range recs {
					state := string(r.State)
					if r.Error != "" { // the whole cause is in -o json; a table cell stays short
						state += " (" + shorten(r.Error, 48) + ")"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Name, state, dash(r.Address), dash(r.ParentID),
						dash(r.CheckpointID), dash(r.Generation), age(r.CreatedAt))
				}
			}, func() []string {
				ids := make([]string, len(recs))
				for i, r := range recs {
					ids[i] = r.ID
				}
				return ids
			})
		},
	}
	out = addOutput(cmd, listCmd)
	out.addJSONAlias(cmd)
	return cmd
}

func newSandboxRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rm ID...",
		Short: "Destroy sandboxes (their checkpoints stay; see `checkpoints rm`)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			failed := 0
			for _, id := range args {
				if err := g.client().RemoveSandbox(cmd.Context(), id); err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "zygo: removing %s: %v\n", id, err)
					failed++
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "removed %s\n", id)
			}
			if failed > 0 {
				return &exitError{code: 1, err: fmt.Errorf("%d of %d sandboxes not removed", failed, len(args))}
			}
			return nil
		},
	}
}

func newSandboxGenerationCmd(g *globals) *cobra.Command {
	var out *Output
	cmd := &cobra.Command{
		Use:   "generation ID",
		Short: "Print the sandbox's generation: 128 random bits, new on every fork and rollback",
		Long: "Print the sandbox's generation token (32 hex digits). Every copy made by fork or rollback\n" +
			"gets a new one, published inside at /run/zygo/generation and /run/zygo/identity.json.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			gen, err := g.client().Generation(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return out.print(cmd, gen, func(w io.Writer) { fmt.Fprintln(w, gen.Generation) }, nil)
		},
	}
	out = addOutput(cmd, singleCmd)
	return cmd
}

// shorten returns s cut to at most n runes, ending in "…" when cut.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// age renders how long ago t was, coarsely: 5s, 3m, 2h, 4d.
func age(t time.Time) string {
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// stdoutIsTerminal reports whether the command's stdout is a terminal: progress is shown only
// then.
func stdoutIsTerminal(cmd *cobra.Command) bool {
	f, ok := cmd.OutOrStdout().(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
