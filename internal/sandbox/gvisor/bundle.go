package gvisor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox"
)

// ociVersion is the runtime-spec version our bundles declare. It stays what the bundles
// saved with older images (zygo-bundle.json) say, which checkImageBundle compares whole.
const ociVersion = "1.0.2"

// capabilities of PID 1: Docker's default set plus CAP_SYS_ADMIN, which the agent needs for
// sethostname and RNDADDENTROPY. PID 1 drops CAP_SYS_ADMIN from its bounding set before it
// starts anything (guest.HardenPID1), so every other process gets Docker's default set. Never
// CAP_SYS_PTRACE: PID 1 holds the channel token and is not dumpable. The sandbox boundary is
// gVisor.
var capabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
	"CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE", "CAP_SYS_ADMIN",
}

// hostBinds are host paths bound read-only when the sandbox uses the host's files; missing
// ones are skipped. /bin, /lib, /lib64 and /sbin are symlinks into /usr in the template.
// Of /etc/ssl only what TLS clients read is bound: the CA certificates and openssl.cnf. Never
// /etc/ssl itself: it holds private/, the host's TLS private keys.
var hostBinds = []string{"/usr", "/etc/alternatives", "/etc/ld.so.cache", "/etc/ssl/certs", "/etc/ssl/openssl.cnf"}

// bundleSpec returns the OCI spec (runsc's config.json) of instance spec.ID whose host
// directory is hostDir.
func (b *Backend) bundleSpec(spec sandbox.Spec, hostDir string) specs.Spec {
	root := b.rootfs
	if spec.RootfsDir != "" {
		root = spec.RootfsDir
	}
	caps := &specs.LinuxCapabilities{Bounding: capabilities, Effective: capabilities, Permitted: capabilities}
	s := specs.Spec{
		Version: ociVersion,
		Process: &specs.Process{Args: []string{guest.BinaryPath}, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}, Cwd: "/",
			Capabilities: caps},
		Root:     &specs.Root{Path: root, Readonly: false}, // readonly:true would make every bind read-only
		Hostname: spec.Hostname,
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		},
		Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.NetworkNamespace},
			{Type: specs.IPCNamespace}, {Type: specs.UTSNamespace}, {Type: specs.MountNamespace}}},
	}
	b.applyLimits(&s, spec)
	if spec.Net != nil {
		// runsc starts the sandbox in this namespace and, with --network=sandbox, moves the
		// interface's addresses, routes and MAC into its own stack (runsc/sandbox/network.go).
		s.Linux.Namespaces[1].Path = spec.Net.NetnsPath
		// Over the root's own /etc/resolv.conf only: a bind needs its mount point, and a given
		// root without one (or with a symlink there) keeps what it has.
		if fi, err := os.Lstat(filepath.Join(root, "etc/resolv.conf")); err == nil && fi.Mode().IsRegular() {
			s.Mounts = append(s.Mounts, specs.Mount{Destination: "/etc/resolv.conf", Type: "bind",
				Source: filepath.Join(b.InstanceDir(spec.ID), resolvConfFile), Options: []string{"bind", "ro"}})
		}
	}
	if spec.HostUID != 0 {
		// runsc (directfs, run as root) starts the sandbox and the gofer each in a new user
		// namespace with these mappings, as the namespace's root: host uid spec.HostUID.
		m := []specs.LinuxIDMapping{{ContainerID: 0, HostID: spec.HostUID, Size: 1}}
		s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace})
		s.Linux.UIDMappings, s.Linux.GIDMappings = m, m
	}
	if spec.RootfsDir == "" {
		for _, p := range hostBinds {
			if _, err := os.Stat(p); err == nil {
				s.Mounts = append(s.Mounts, specs.Mount{Destination: p, Type: "bind", Source: p, Options: []string{"rbind", "ro"}})
			}
		}
	}
	s.Mounts = append(s.Mounts,
		specs.Mount{Destination: guest.BinaryPath, Type: "bind", Source: b.guestBin, Options: []string{"bind", "ro"}},
		// Read-only: code in the sandbox can neither replace the host's socket nor write to the
		// host's disk through it (internal/guest/proto.go, "The channel").
		specs.Mount{Destination: guest.HostDir, Type: "bind", Source: hostDir, Options: []string{"rbind", "ro"}},
	)
	return s
}

func writeJSON(path string, v any, perm os.FileMode) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, perm)
}

// templateDirs and templateFiles make the default root: empty mount points and a few /etc
// files; everything else comes from the read-only binds, and every write lands in memory.
var templateDirs = []string{"usr", "etc/alternatives", "etc/ssl/certs", "proc", "sys", "dev", "tmp", "run", "root",
	"var/tmp", "home", "zygo/host", "mnt"}

var templateFiles = map[string]string{
	"etc/passwd":          "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
	"etc/group":           "root:x:0:\nnogroup:x:65534:\n",
	"etc/hosts":           "127.0.0.1\tlocalhost\n::1\tlocalhost\n",
	"etc/resolv.conf":     "",
	"etc/ld.so.cache":     "",
	"etc/ssl/openssl.cnf": "",
	"etc/machine-id":      "",
	"etc/hostname":        "",
	"zygo/guest":          "",
	"etc/nsswitch.conf":   "passwd: files\ngroup: files\nhosts: files\n",
}

// ensureRootfs creates the template root at dir if it is not complete. It never changes an
// existing file: images restored later expect the root they were taken on.
func ensureRootfs(dir string) error {
	for _, d := range templateDirs {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return fmt.Errorf("making template dir: %w", err)
		}
	}
	_ = os.Chmod(filepath.Join(dir, "tmp"), 0o1777)
	_ = os.Chmod(filepath.Join(dir, "var/tmp"), 0o1777)
	for name, content := range templateFiles {
		p := filepath.Join(dir, name)
		if _, err := os.Lstat(p); err == nil {
			continue
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return fmt.Errorf("writing template file: %w", err)
		}
	}
	for _, l := range []string{"bin", "lib", "lib64", "sbin"} {
		p := filepath.Join(dir, l)
		if _, err := os.Lstat(p); err == nil {
			continue
		}
		if err := os.Symlink("usr/"+l, p); err != nil {
			return fmt.Errorf("linking template %s: %w", l, err)
		}
	}
	return nil
}
