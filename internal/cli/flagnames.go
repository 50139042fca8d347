package cli

import (
	"errors"
	"regexp"
	"strings"

	"github.com/zygo-run/zygo/sdk/go/wire"
	"github.com/zygo-run/zygo/sdk/go/zygo"
)

// fieldFlag is one request field a command fills from a flag: the API names the field
// (network.allow[0]) as its body spells it; the CLI's user typed the flag (--allow).
type fieldFlag struct{ field, flag string }

// createFlags are sandbox create's flags by the field of wire.CreateSandboxBody they fill.
var createFlags = []fieldFlag{
	{"network.mode", "--network"}, {"network.allow", "--allow"}, {"network.deny", "--deny"},
	{"network", "--network"}, {"memory_mib", "--memory"}, {"pids", "--pids"}, {"cpus", "--cpus"},
	{"rootfs_dir", "--rootfs"}, {"services", "--service"}, {"secrets", "--secret"},
	{"env", "--env"}, {"name", "--name"}, {"template", "--template"}, {"timeout", "--timeout"}, {"on_timeout", "--on-timeout"},
}

// fieldIndex is a field's element index (network.allow[0]); the flag's value, quoted in the
// message that follows, says which one it was.
var fieldIndex = regexp.MustCompile(`^\[\d+\]`)

// nameFlags returns err with every request field that stands as an element of a 400's
// message (at its start or after ": ") renamed to the flag that filled it, from flags; any
// other error as it is. The daemon keeps the API's field names; this is the CLI's mapping.
func nameFlags(err error, flags []fieldFlag) error {
	var ze *zygo.Error
	if !errors.As(err, &ze) || ze.Code != wire.CodeBadRequest {
		return err
	}
	elems := strings.Split(ze.Message, ": ")
	for i, el := range elems {
		for _, f := range flags {
			rest, ok := strings.CutPrefix(el, f.field)
			if !ok {
				continue
			}
			rest = fieldIndex.ReplaceAllString(rest, "")
			if rest == "" || rest[0] == ' ' {
				elems[i] = f.flag + rest
				break
			}
		}
	}
	out := *ze
	out.Message = strings.Join(elems, ": ")
	return &out
}
