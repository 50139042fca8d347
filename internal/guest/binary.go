package guest

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// BinaryName is the file name of the guest agent binary (make build puts it in bin/, beside zygo).
const BinaryName = "zygo-guest"

// FindBinary returns the absolute path of the zygo-guest to use: configured if set, else
// the one next to the running executable (symlinks resolved), else the one on PATH. It is
// the one finder the daemon and the fork checks use. flag names the option that sets
// configured, for the error's hint (e.g. "zygo serve --guest-binary"). Errors: not found, not
// a regular file, not an ELF executable, or dynamically linked — the guest is PID 1 of a root
// that has no dynamic loader of its choosing, so it must be static (CGO_ENABLED=0).
func FindBinary(configured, flag string) (string, error) {
	how := fmt.Sprintf("build it with `make build` (bin/%s, CGO_ENABLED=0) or pass `%s PATH`", BinaryName, flag)
	p := configured
	if p == "" {
		if exe, err := os.Executable(); err == nil {
			if exe, err = filepath.EvalSymlinks(exe); err == nil {
				if c := filepath.Join(filepath.Dir(exe), BinaryName); regularFile(c) {
					p = c
				}
			}
		}
	}
	if p == "" {
		p, _ = exec.LookPath(BinaryName)
	}
	if p == "" {
		return "", fmt.Errorf("%s not found next to the zygo binary or on PATH: %s", BinaryName, how)
	}
	if !regularFile(p) {
		return "", fmt.Errorf("guest binary %s not found: %s", p, how)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("finding the guest binary: %w", err)
	}
	if err := checkStatic(abs); err != nil {
		return "", fmt.Errorf("%w: %s", err, how)
	}
	return abs, nil
}

func regularFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// checkStatic returns an error when p is not an ELF executable without an interpreter.
func checkStatic(p string) error {
	f, err := elf.Open(p)
	if err != nil {
		return fmt.Errorf("guest binary %s is not an executable: %w", p, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("guest binary %s is dynamically linked", p)
		}
	}
	return nil
}
