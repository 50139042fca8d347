package sandbox

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/guest"
)

// A template is what a sandbox is made from, by name: a root directory (RootfsDir; "" is the
// default root, the host's /usr read-only) and a setup run as root in every sandbox created
// from it, before it is handed out. Copies (forks, rollbacks, restores) are of an image, which
// already holds what the setup made.

// BaseTemplate is the built-in template E2B's SDKs create by default: the default root with
// the user "user" (uid and gid 1000, home /home/user, shell /bin/sh), Python 3 and Node from
// the host's /usr.
const BaseTemplate = "base"

// CodeInterpreterTemplate is the template @e2b/code-interpreter creates by default: the same
// as BaseTemplate (Zygo's interpreter is the guest's, in every sandbox).
const CodeInterpreterTemplate = "code-interpreter-v1"

// baseSetup is what the base template's setup adds: /etc/passwd and /etc/group lines and a
// home owned by the user. The root's files are in memory (writes never reach the host), so
// the setup edits them in place; it leaves a root that has the user already as it is.
const baseSetup = `set -e
grep -q '^user:' /etc/passwd || echo 'user:x:1000:1000:user:/home/user:/bin/sh' >> /etc/passwd
grep -q '^user:' /etc/group || echo 'user:x:1000:' >> /etc/group
mkdir -p /home/user
chown 1000:1000 /home/user
chmod 0750 /home/user
`

// Template is one registered template.
type Template struct {
	Name string `json:"name"`
	// RootfsDir is the root (CreateOptions.RootfsDir); "" is the default root.
	RootfsDir string `json:"rootfs_dir,omitempty"`
	// Description says what is in it, for listings.
	Description string `json:"description,omitempty"`
	// Setup is run with /bin/sh -c as root in each sandbox created from the template, before
	// it is handed out; a non-zero exit fails the create. "" is none.
	Setup string `json:"-"`
}

var templateNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// ParseTemplate parses a --template flag's NAME=DIR: a lowercase name (not "base", which is
// built in) and an absolute path to a non-empty root directory. It returns an error naming
// the flag's value on bad input.
func ParseTemplate(s string) (Template, error) {
	name, dir, ok := strings.Cut(s, "=")
	if !ok || !templateNameRE.MatchString(name) {
		return Template{}, fmt.Errorf("template %q: want NAME=DIR, NAME 1-63 of [a-z0-9_.-] starting with a letter or digit", s)
	}
	if name == BaseTemplate || name == CodeInterpreterTemplate {
		return Template{}, fmt.Errorf("template %q: %q is built in", s, name)
	}
	if dir == "" {
		return Template{}, fmt.Errorf("template %q: DIR is empty", s)
	}
	if err := ValidateRootfs(dir); err != nil {
		return Template{}, fmt.Errorf("template %q: %w", s, err)
	}
	return Template{Name: name, RootfsDir: dir, Description: "rootfs " + dir}, nil
}

// Templates returns the templates: the built-in BaseTemplate and CodeInterpreterTemplate, then
// the registered ones by name.
func (m *Manager) Templates() []Template {
	base := "the default root (the host's /usr: Python 3, Node) with the user \"user\" (uid 1000, /home/user)"
	out := []Template{{Name: BaseTemplate, Setup: baseSetup, Description: base},
		{Name: CodeInterpreterTemplate, Setup: baseSetup, Description: "as base (E2B's code interpreter's default)"}}
	extra := slices.Clone(m.cfg.Templates)
	slices.SortFunc(extra, func(a, b Template) int { return strings.Compare(a.Name, b.Name) })
	return append(out, extra...)
}

// template returns the template called name, or an error wrapping errdefs.ErrNotFound.
func (m *Manager) template(name string) (Template, error) {
	for _, t := range m.Templates() {
		if t.Name == name {
			return t, nil
		}
	}
	names := make([]string, 0, len(m.cfg.Templates)+1)
	for _, t := range m.Templates() {
		names = append(names, t.Name)
	}
	return Template{}, fmt.Errorf("template %q: %w (templates: %s)", name, errdefs.ErrNotFound, strings.Join(names, ", "))
}

// setupTimeout bounds a template's setup.
const setupTimeout = 60 * time.Second

// runSetup runs a template's setup in a new sandbox's guest.
func runSetup(ctx context.Context, g Guest, t Template) error {
	if t.Setup == "" {
		return nil
	}
	var out strings.Builder
	st, err := g.Exec(ctx, guest.ExecRequest{Argv: []string{"/bin/sh", "-c", t.Setup}, Timeout: setupTimeout}, &out, &out)
	if err != nil {
		return fmt.Errorf("running the setup of template %s: %w", t.Name, err)
	}
	if st.Code != 0 {
		return fmt.Errorf("the setup of template %s exited %d: %s", t.Name, st.Code, strings.TrimSpace(out.String()))
	}
	return nil
}
