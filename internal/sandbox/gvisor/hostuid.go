package gvisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox"
)

// Who may read what, when an instance runs as its own host uid (sandbox.Spec.HostUID = U):
// runsc starts the sandbox and the gofer as U, root of their own user namespaces, and U owns
// nothing. Every path they open on the host must be reachable by U through its "other" or
// group bits:
//
//	StateDir, instances/, bin/       0711 root:root  traversed, never listed
//	rootfs/                          0755 root:root  the shared read-only template
//	bin/zygo-guest                   0755 root:root
//	instances/ID/                    0710 root:U     traversed by U only
//	instances/ID/host/               0750 root:U     listed and read by U, written by root only
//	instances/ID/host/boot.json      0640 root:U
//	instances/ID/host/agent.sock     0660 root:U     connect(2) needs write permission
//
// config.json, runsc.log and sandbox.pid stay 0600 root: only the runsc commands the daemon
// runs (as root) read them. runsc/ (--root) stays 0700.

// prepareDirs makes the backend's directories: stateDir and the traversed ones 0711, runscRoot
// 0700. Existing ones get those modes.
func prepareDirs(stateDir, runscRoot string, traversed ...string) error {
	for _, d := range append([]string{stateDir}, traversed...) {
		if err := mkdirMode(d, 0o711); err != nil {
			return err
		}
	}
	return mkdirMode(runscRoot, 0o700)
}

func mkdirMode(dir string, mode os.FileMode) error {
	if err := os.MkdirAll(dir, mode); err != nil {
		return fmt.Errorf("making state dir: %w", err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		return fmt.Errorf("setting the mode of the state dir: %w", err)
	}
	return nil
}

// makeInstanceDirs creates an instance's dir and its host dir (both new), readable by uid
// (0: root only).
func makeInstanceDirs(instDir, hostDir string, uid uint32) error {
	if err := os.Mkdir(instDir, 0o700); err != nil {
		return fmt.Errorf("making instance dir: %w", err)
	}
	if err := os.Mkdir(hostDir, 0o700); err != nil {
		return fmt.Errorf("making instance dir: %w", err)
	}
	if err := shareWithEngine(instDir, uid, 0o710); err != nil {
		return err
	}
	return shareWithEngine(hostDir, uid, 0o750)
}

// shareWithEngine gives path (which the daemon just made, root-owned) group uid and mode, so
// that engine processes running as uid reach it. uid 0 leaves path as it is.
func shareWithEngine(path string, uid uint32, mode os.FileMode) error {
	if uid == 0 {
		return nil
	}
	if err := os.Lchown(path, 0, int(uid)); err != nil {
		return fmt.Errorf("sharing %s with the engine's uid: %w", path, err)
	}
	if err := os.Chmod(path, mode); err != nil {
		return fmt.Errorf("sharing %s with the engine's uid: %w", path, err)
	}
	return nil
}

// shareLikeHostDir gives the socket sock, in an instance's host dir, that dir's group and
// mode 0660, when the dir is shared with an engine uid (its group is not root's).
func shareLikeHostDir(sock string) error {
	var st unix.Stat_t
	if err := unix.Stat(filepath.Dir(sock), &st); err != nil {
		return fmt.Errorf("reading the host dir's owner: %w", err)
	}
	return shareWithEngine(sock, st.Gid, 0o660)
}

// imageBundle, in an image dir, is a copy of the bundle (config.json) of the instance the image
// was taken of. A restored copy may run as a host uid of its own, which runsc's check of the
// new bundle against the one in the image (runsc/specutils/restore.go, validateSpecForContainer
// at the pinned version: UIDMappings must be equal) would refuse; checkImageBundle makes the
// same check with the fields a copy may change left out, and restore passes runsc
// --restore-spec-validation=warning.
const imageBundle = "zygo-bundle.json"

// saveImageBundle copies instDir's config.json into imageDir.
func saveImageBundle(instDir, imageDir string) error {
	data, err := os.ReadFile(filepath.Join(instDir, "config.json"))
	if err != nil {
		return fmt.Errorf("reading the instance's bundle: %w", err)
	}
	if err := os.WriteFile(filepath.Join(imageDir, imageBundle), data, 0o600); err != nil {
		return fmt.Errorf("saving the bundle with the image: %w", err)
	}
	return nil
}

// checkImageBundle returns an error wrapping errdefs.ErrFailedPrecondition when spec's bundle
// differs from the image's in anything but what each copy has of its own: hostname, cgroup,
// host dir and host uid, and what each engine has of its own: where its copies of the guest
// binary and of the default root are. An image without a saved bundle taken here (by an older
// zygo, on the same bundle code) is not checked. An imported one (spec.ImageImported) must
// have its bundle, and its root's path is left out of the comparison whatever the root (each
// daemon's template of a name has its own directory): the root is spec's, which the Manager
// resolved on this daemon; nothing of the image's bundle is used but to compare.
func (b *Backend) checkImageBundle(imageDir string, spec sandbox.Spec) error {
	data, err := os.ReadFile(filepath.Join(imageDir, imageBundle))
	if errors.Is(err, os.ErrNotExist) {
		if spec.ImageImported {
			return fmt.Errorf("the image was imported without its bundle (%s), which an imported image must carry: %w",
				imageBundle, errdefs.ErrFailedPrecondition)
		}
		b.log.Warn("restoring an image without its bundle: runsc only warns of a mismatch", "engine_id", spec.ID)
		return nil
	}
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the cause, without the daemon's path
		}
		return fmt.Errorf("reading the image's bundle: %s: %w", err.Error(), errdefs.ErrFailedPrecondition)
	}
	var old specs.Spec // as runsc reads it
	if err := json.Unmarshal(data, &old); err != nil {
		return fmt.Errorf("image's bundle: %w: %w", err, errdefs.ErrFailedPrecondition)
	}
	x, y := perCopyCleared(old), perCopyCleared(b.bundleSpec(spec, ""))
	if (spec.RootfsDir == "" || spec.ImageImported) && x.Root != nil && y.Root != nil {
		// The default root is each engine's own copy (STATE/rootfs) of one template, and a
		// template's directory is each daemon's own: an image imported from another daemon
		// names that daemon's. A root given here (a rootfs_dir) must be the same path.
		xr, yr := *x.Root, *y.Root
		xr.Path, yr.Path = "", ""
		x.Root, y.Root = &xr, &yr
	}
	if !reflect.DeepEqual(x, y) {
		return fmt.Errorf("the image was taken of a sandbox with another bundle (root, mounts, limits or "+
			"capabilities differ): %w", errdefs.ErrFailedPrecondition)
	}
	return nil
}

// CheckImportedImage implements sandbox.ImportChecker: checkImageBundle of an imported image.
func (b *Backend) CheckImportedImage(imageDir string, spec sandbox.Spec) error {
	spec.ImageImported = true
	return b.checkImageBundle(imageDir, spec)
}

var _ sandbox.ImportChecker = (*Backend)(nil)

// perCopyCleared returns s without what each restored copy has of its own.
func perCopyCleared(s specs.Spec) specs.Spec {
	s.Hostname = ""
	if s.Linux != nil {
		l := *s.Linux
		l.CgroupsPath = ""
		l.UIDMappings, l.GIDMappings = nil, nil
		l.Namespaces = append([]specs.LinuxNamespace(nil), l.Namespaces...)
		for i := range l.Namespaces {
			l.Namespaces[i].Path = "" // each copy's network namespace is its own
		}
		s.Linux = &l
	}
	s.Mounts = append([]specs.Mount(nil), s.Mounts...)
	for i := range s.Mounts {
		// The guest binary is each engine's own copy (ENGINE/bin) of the daemon's zygo-guest.
		if d := s.Mounts[i].Destination; d == guest.HostDir || d == "/etc/resolv.conf" || d == guest.BinaryPath {
			s.Mounts[i].Source = ""
		}
	}
	return s
}
