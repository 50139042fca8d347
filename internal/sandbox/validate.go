package sandbox

// Input checks of the Manager's public methods. Each returns an error wrapping
// errdefs.ErrInvalidArgument whose message starts with the name of the API field at fault
// ("path", "argv[2]", "services[0].env[1]", "tag", ...), quotes at most a short prefix of
// the value, and never names a host path of the daemon's: bad input is the caller's error
// (400), found before anything is made or any guest is called.

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/secret"
)

// Bounds of what a call may hand a guest, Linux's where it has one.
const (
	// MaxPathBytes is the longest path inside a sandbox, in bytes: PATH_MAX less its NUL.
	MaxPathBytes = 4095
	// MaxPathComponentBytes is the longest name of one path component: NAME_MAX.
	MaxPathComponentBytes = 255
	// MaxArgBytes is the longest single argv or env string, in bytes: MAX_ARG_STRLEN.
	MaxArgBytes = 128 << 10
	// MaxArgvEnvBytes bounds argv and env of one command together, in bytes (execve's
	// ARG_MAX is a quarter of an 8 MiB stack).
	MaxArgvEnvBytes = 2 << 20
	// MaxArgs bounds the entries of one argv, and of one env.
	MaxArgs = 4096
	// MaxServices bounds the services of a sandbox.
	MaxServices = 64
	// MaxSecrets bounds the secrets a sandbox names.
	MaxSecrets = 256
)

// invalid returns an error wrapping errdefs.ErrInvalidArgument: "field: msg".
func invalid(field, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %w", field, fmt.Sprintf(format, args...), errdefs.ErrInvalidArgument)
}

// short quotes at most the first 40 bytes of s, for messages.
func short(s string) string {
	if len(s) > 40 {
		return fmt.Sprintf("%q…", s[:40])
	}
	return fmt.Sprintf("%q", s)
}

// ValidatePath checks a path inside the sandbox given in field: absolute, no NUL, at most
// MaxPathBytes, no component over MaxPathComponentBytes.
func ValidatePath(field, p string) error {
	switch {
	case p == "":
		return invalid(field, "is empty: want an absolute path inside the sandbox")
	case strings.IndexByte(p, 0) >= 0:
		return invalid(field, "contains a NUL byte")
	case p[0] != '/':
		return invalid(field, "%s is relative: want an absolute path inside the sandbox", short(p))
	case len(p) > MaxPathBytes:
		return invalid(field, "is %d bytes long: at most %d", len(p), MaxPathBytes)
	}
	for c := range strings.SplitSeq(p, "/") {
		if len(c) > MaxPathComponentBytes {
			return invalid(field, "has a component of %d bytes (%s): at most %d", len(c), short(c), MaxPathComponentBytes)
		}
	}
	return nil
}

// validateStrings checks the strings of one argv or env: at most MaxArgs, each without NUL
// and at most MaxArgBytes; it returns their total size.
func validateStrings(field string, ss []string) (int, error) {
	if len(ss) > MaxArgs {
		return 0, invalid(field, "has %d entries: at most %d", len(ss), MaxArgs)
	}
	total := 0
	for i, s := range ss {
		f := fmt.Sprintf("%s[%d]", field, i)
		if strings.IndexByte(s, 0) >= 0 {
			return 0, invalid(f, "contains a NUL byte")
		}
		if len(s) > MaxArgBytes {
			return 0, invalid(f, "is %d bytes long: at most %d", len(s), MaxArgBytes)
		}
		total += len(s) + 1
	}
	return total, nil
}

// ValidateArgv checks a command's argv given in field: a non-empty argv[0], and the bounds of
// validateStrings. It returns argv's total size in bytes.
func ValidateArgv(field string, argv []string) (int, error) {
	if len(argv) == 0 || argv[0] == "" {
		return 0, invalid(field, "is empty: want the command and its arguments")
	}
	return validateStrings(field, argv)
}

// ValidateEnv checks KEY=VALUE entries given in field: a non-empty KEY without '=', no NUL,
// and the bounds of validateStrings. It returns their total size in bytes.
func ValidateEnv(field string, env []string) (int, error) {
	n, err := validateStrings(field, env)
	if err != nil {
		return 0, err
	}
	for i, kv := range env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return 0, invalid(fmt.Sprintf("%s[%d]", field, i), "%s: want KEY=VALUE with a non-empty KEY", short(kv))
		}
	}
	return n, nil
}

// validateCommand checks argv and env of one command together (MaxArgvEnvBytes).
func validateCommand(field string, argv []string, envField string, env []string) error {
	a, err := ValidateArgv(field, argv)
	if err != nil {
		return err
	}
	e, err := ValidateEnv(envField, env)
	if err != nil {
		return err
	}
	if a+e > MaxArgvEnvBytes {
		return invalid(field, "and %s are %d bytes together: at most %d", envField, a+e, MaxArgvEnvBytes)
	}
	return nil
}

// ValidateExec checks an exec request: argv, env, cwd, timeout.
func ValidateExec(req guest.ExecRequest) error {
	if err := validateCommand("argv", req.Argv, "env", req.Env); err != nil {
		return err
	}
	if req.Cwd != "" {
		if err := ValidatePath("cwd", req.Cwd); err != nil {
			return err
		}
	}
	if req.Timeout < 0 {
		return invalid("timeout_ms", "must not be negative")
	}
	return nil
}

// tagRE is what a checkpoint tag may look like: as a sandbox name (nameRE).
var tagRE = nameRE

// idRE is a sandbox or checkpoint id as newID makes them.
var idRE = regexp.MustCompile(`^(sb|cp)-[0-9a-f]{16}$`)

// ValidateTag checks a checkpoint tag: empty, or 1-63 of [A-Za-z0-9_.-] starting with a letter
// or digit, and not shaped like an id (cp-/sb- and 16 hex digits): a reference is looked up as
// an id first, so such a tag could name another checkpoint, or never be reached.
func ValidateTag(tag string) error {
	if tag != "" && !tagRE.MatchString(tag) {
		return invalid("tag", "%s: want 1-63 of [A-Za-z0-9_.-], starting with a letter or digit", short(tag))
	}
	if idRE.MatchString(tag) {
		return invalid("tag", "%s is shaped like a checkpoint or sandbox id (cp-/sb- and 16 hex digits): choose another", short(tag))
	}
	return nil
}

// ValidateCheckpointRef checks a reference to a checkpoint given in field: a checkpoint id or
// a tag. A well-formed reference that names nothing is not an error here (it is
// errdefs.ErrNotFound where it is looked up); a malformed one is.
func ValidateCheckpointRef(field, ref string) error {
	if ref == "" {
		return invalid(field, "is empty: want a checkpoint id (cp-...) or tag")
	}
	if !idRE.MatchString(ref) && !tagRE.MatchString(ref) {
		return invalid(field, "%s is neither a checkpoint id (cp-...) nor a tag (1-63 of [A-Za-z0-9_.-])", short(ref))
	}
	return nil
}

// validateSandboxRef checks a reference to a sandbox: an id or a name (ValidateName).
func validateSandboxRef(ref string) error {
	if ref == "" || (!idRE.MatchString(ref) && !nameRE.MatchString(ref)) {
		return invalid("sandbox", "%s is neither a sandbox id (sb-...) nor a name (1-63 of [A-Za-z0-9_.-])", short(ref))
	}
	return nil
}

// validateCreate checks what Create can check without touching the host: name, rootfs_dir's
// shape, env, services, secrets' names, limits. Create checks the rootfs on disk after it.
func validateCreate(o CreateOptions) error {
	if err := ValidateName(o.Name); err != nil {
		return err
	}
	if o.RootfsDir != "" {
		if err := ValidatePath("rootfs_dir", o.RootfsDir); err != nil {
			return err
		}
	}
	if _, err := ValidateEnv("env", o.Env); err != nil {
		return err
	}
	if err := validateServices(o.Services); err != nil {
		return err
	}
	if len(o.Secrets) > MaxSecrets {
		return invalid("secrets", "names %d secrets: at most %d", len(o.Secrets), MaxSecrets)
	}
	for i, n := range o.Secrets {
		if secret.ValidName(n) != nil {
			return invalid(fmt.Sprintf("secrets[%d]", i), "secret name %s must match %s", short(n), secret.NamePattern)
		}
		if strings.HasPrefix(n, secret.TenantPrefix) {
			return invalid(fmt.Sprintf("secrets[%d]", i), "secret name %s: names beginning with %s are pool tenants' secrets, which no sandbox may read", short(n), secret.TenantPrefix)
		}
	}
	if err := validateNetwork(o.Network); err != nil {
		return err
	}
	if err := validateLifecycle(o.Lifecycle); err != nil {
		return err
	}
	if err := validateMetadata(o.Metadata); err != nil {
		return err
	}
	return ValidateLimits(o)
}

// validateServices checks the declared services: each's name (as a sandbox name), argv and
// env, then guest.ValidateServices for their policies and uniqueness.
func validateServices(svcs []guest.Service) error {
	if len(svcs) > MaxServices {
		return invalid("services", "declares %d services: at most %d", len(svcs), MaxServices)
	}
	for i, s := range svcs {
		f := fmt.Sprintf("services[%d]", i)
		if !nameRE.MatchString(s.Name) {
			return invalid(f+".name", "%s: want 1-63 of [A-Za-z0-9_.-], starting with a letter or digit", short(s.Name))
		}
		if err := validateCommand(f+".argv", s.Argv, f+".env", s.Env); err != nil {
			return fmt.Errorf("service %q: %w", s.Name, err)
		}
	}
	if err := guest.ValidateServices(svcs); err != nil {
		return invalid("services", "%v", err)
	}
	return nil
}

// validateTimeout checks a run-code timeout.
func validateTimeout(d time.Duration) error {
	if d < 0 {
		return invalid("timeout_ms", "must not be negative")
	}
	return nil
}
