// Package seccomp generates Zygo's seccomp filters as classic BPF programs
// (struct sock_filter arrays, as loaded by seccomp(2) and by bubblewrap's
// --seccomp FD), using github.com/elastic/go-seccomp-bpf for the syscall
// tables and the assembler.
//
// Two filters exist:
//   - Default: installed by bubblewrap on every ns sandbox, inherited by the
//     zygote and every child. Denies the syscalls in DefaultDenied with EPERM,
//     those in SelfOnly with EPERM unless they target the caller itself, clone
//     asking for a new namespace (NewNamespaceFlags) with EPERM, and clone3
//     with ENOSYS (its flags are in memory, out of a filter's sight).
//   - Strict: installed by a child after GO under `strict = true`, on top of
//     the default (filters stack; the kernel takes the strictest answer, see
//     Documentation/userspace-api/seccomp_filter.rst). Denies execve,
//     execveat, fork, vfork and clone without CLONE_THREAD with EPERM, and
//     clone3 with ENOSYS (so that glibc falls back to clone for threads).
//
// Both filters start with an architecture check: a syscall made through
// another ABI (i386 via int 0x80, x32) fails with ENOSYS, so the deny lists
// cannot be bypassed by switching ABI.
package seccomp

import (
	"bytes"
	"encoding/binary"
	"fmt"

	libseccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// DefaultDenied lists the syscalls the default filter refuses with EPERM:
// kernel module and kexec loading, mounts and namespace changes, tracing and
// cross-process memory access, keyrings, BPF and perf, clock and host
// settings, swap, SysV shared memory and message queues, io_uring,
// userfaultfd and handle-based opens. docs/ARCHITECTURE.md
// repeats this list.
var DefaultDenied = []string{
	// kernel modules and kexec
	"init_module", "finit_module", "delete_module", "create_module", "kexec_load", "kexec_file_load",
	// mounts and namespaces (bubblewrap has set them up already)
	"mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
	"fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
	// tracing and other processes' memory
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
	// kernel keyrings, BPF, perf
	"add_key", "request_key", "keyctl", "bpf", "perf_event_open", "lookup_dcookie",
	// host-wide settings
	"settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "reboot", "swapon", "swapoff",
	"acct", "syslog", "sethostname", "setdomainname", "quotactl", "nfsservctl", "uselib",
	"ioperm", "iopl", "vhangup", "_sysctl", "personality",
	// SysV shared memory, semaphores and message queues: what a request puts
	// there outlives it in the sandbox's ipc namespace, uncapped (shmall,
	// semmns, msgmni; the kernel memory is charged to the request's cgroup and
	// moves to the function's unlimited parent when that is removed) and
	// outside every tmpfs, until the zygote stops; POSIX shared memory and
	// named semaphores (/dev/shm, capped) are the way
	"shmget", "semget", "msgget",
	// large attack surface, not needed by functions
	"io_uring_setup", "io_uring_enter", "io_uring_register", "userfaultfd",
	"open_by_handle_at", "name_to_handle_at",
}

// NewNamespaceFlags are the clone(2) flags that make a namespace: mount,
// cgroup, uts, ipc, user, pid, net. The default filter refuses a clone with
// any of them (EPERM), as it refuses unshare and setns: a request must not
// reach the kernel code a new user namespace (full capabilities over its
// own network, mounts, ...) opens, whether or not bwrap --disable-userns is
// in force too. CLONE_NEWTIME (0x80) is not among them: in clone(2) the low
// byte is the exit signal, and only unshare and clone3 can ask for it.
const NewNamespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

// clone3NoSys refuses clone3 with ENOSYS (not EPERM): it passes its flags in
// memory, where a filter cannot read them, and ENOSYS makes glibc (threads,
// fork, posix_spawn) fall back to clone(2), whose flags the filters check.
var clone3NoSys = libseccomp.SyscallGroup{
	Action: libseccomp.Action(unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)),
	Names:  []string{"clone3"},
}

// SelfOnly lists the syscalls that change another process's limits,
// priority, CPU affinity, scheduling or I/O priority when given its pid.
// The kernel allows them to any process of the same uid without a ptrace
// access check, so neither the agents' non-dumpable flag nor a request's
// Landlock domain (which scopes ptrace, signals and abstract sockets)
// covers them: a request could otherwise set its zygote's RLIMIT_FSIZE to 0
// or an idle sibling's RLIMIT_NOFILE to 3. The default filter refuses each
// with EPERM unless it targets the caller the one way a filter can see:
// pid 0, and for setpriority and ioprio_set the "process" kind with who 0
// (their "process group" and "user" kinds reach the zygote even with who 0).
// A call naming the caller by its own pid or thread id is refused too
// (docs/security.md says what that breaks). prlimit64 is refused only when
// it sets a limit (new_limit not NULL): reading another process's limits is
// allowed, as are the get variants of the others.
var SelfOnly = []SelfOnlyRule{
	{Name: "prlimit64", Self: []ArgIs{{0, 0}}, ReadOnly: &ArgIs{2, 0}},
	{Name: "setpriority", Self: []ArgIs{{0, unix.PRIO_PROCESS}, {1, 0}}},
	{Name: "sched_setaffinity", Self: []ArgIs{{0, 0}}},
	{Name: "sched_setscheduler", Self: []ArgIs{{0, 0}}},
	{Name: "sched_setparam", Self: []ArgIs{{0, 0}}},
	{Name: "sched_setattr", Self: []ArgIs{{0, 0}}},
	{Name: "ioprio_set", Self: []ArgIs{{0, ioprioWhoProcess}, {1, 0}}},
}

// ioprioWhoProcess is IOPRIO_WHO_PROCESS (linux/ioprio.h).
const ioprioWhoProcess = 1

// SelfOnlyRule is one entry of SelfOnly: the call passes when every Self
// argument has its value, or (when ReadOnly is set) when that argument has
// its value (the call only reads).
type SelfOnlyRule struct {
	Name     string
	Self     []ArgIs
	ReadOnly *ArgIs
}

// ArgIs is "syscall argument Arg (0-5) equals Value", compared on all 64
// bits: upper bits the kernel would drop from an int argument still count,
// so they cannot smuggle a pid past the check.
type ArgIs struct {
	Arg   uint32
	Value uint64
}

// Default returns the default filter as a raw BPF program: 8 bytes per
// instruction in native byte order (u16 code, u8 jt, u8 jf, u32 k), the
// format bubblewrap reads from its --seccomp file descriptor.
func Default() ([]byte, error) {
	p := libseccomp.Policy{
		DefaultAction: libseccomp.ActionAllow,
		Syscalls: []libseccomp.SyscallGroup{
			{Action: libseccomp.ActionErrno, Names: DefaultDenied},
			{Action: libseccomp.ActionErrno, NamesWithCondtions: selfOnlyConditions(SelfOnly)},
			clone3NoSys,
			{
				Action: libseccomp.ActionErrno,
				NamesWithCondtions: []libseccomp.NameWithConditions{{
					Name: "clone",
					Conditions: libseccomp.ArgumentConditions{
						{Argument: 0, Operation: libseccomp.BitsSet, Value: NewNamespaceFlags},
					},
				}},
			},
		},
	}
	return assemble(p)
}

// selfOnlyConditions turns rules into deny conditions: a call is refused
// when any Self argument differs from its value (the library ORs condition
// sets given for the same name, and ANDs the conditions within one), and
// for a rule with ReadOnly, only when that argument differs too.
func selfOnlyConditions(rules []SelfOnlyRule) []libseccomp.NameWithConditions {
	var out []libseccomp.NameWithConditions
	for _, r := range rules {
		for _, a := range r.Self {
			conds := libseccomp.ArgumentConditions{{Argument: a.Arg, Operation: libseccomp.NotEqual, Value: a.Value}}
			if r.ReadOnly != nil {
				conds = append(conds, libseccomp.Condition{Argument: r.ReadOnly.Arg, Operation: libseccomp.NotEqual, Value: r.ReadOnly.Value})
			}
			out = append(out, libseccomp.NameWithConditions{Name: r.Name, Conditions: conds})
		}
	}
	return out
}

// StrictDenied lists what the strict filter adds; clone is denied only
// without CLONE_THREAD, so threads keep working.
var StrictDenied = []string{"execve", "execveat", "fork", "vfork", "clone (without CLONE_THREAD)", "clone3 (ENOSYS)"}

// Strict returns the strict filter in the same raw format as Default.
func Strict() ([]byte, error) {
	p := libseccomp.Policy{
		DefaultAction: libseccomp.ActionAllow,
		Syscalls: []libseccomp.SyscallGroup{
			{Action: libseccomp.ActionErrno, Names: []string{"execve", "execveat", "fork", "vfork"}},
			clone3NoSys, // glibc falls back to clone(2), checked next: threads keep working
			{
				Action: libseccomp.ActionErrno,
				NamesWithCondtions: []libseccomp.NameWithConditions{{
					Name: "clone",
					Conditions: libseccomp.ArgumentConditions{
						{Argument: 0, Operation: libseccomp.BitsNotSet, Value: unix.CLONE_THREAD},
					},
				}},
			},
		},
	}
	return assemble(p)
}

// archCheck refuses (ENOSYS) every syscall whose audit arch is not the
// native one. The library's own check lets a foreign arch fall through to
// the default action (allow), which would bypass a deny list.
func archCheck() ([]bpf.Instruction, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, err
	}
	return []bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)},
	}, nil
}

func assemble(p libseccomp.Policy) ([]byte, error) {
	prog, err := p.Assemble()
	if err != nil {
		return nil, fmt.Errorf("assembling seccomp policy: %w", err)
	}
	pre, err := archCheck()
	if err != nil {
		return nil, fmt.Errorf("assembling seccomp policy: %w", err)
	}
	raw, err := bpf.Assemble(append(pre, prog...))
	if err != nil {
		return nil, fmt.Errorf("assembling seccomp policy: %w", err)
	}
	var buf bytes.Buffer
	for _, ins := range raw {
		_ = binary.Write(&buf, binary.NativeEndian, struct {
			Op     uint16
			Jt, Jf uint8
			K      uint32
		}{ins.Op, ins.Jt, ins.Jf, ins.K})
	}
	return buf.Bytes(), nil
}
