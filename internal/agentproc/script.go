package agentproc

import (
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/zygo-run/zygo/internal/untrusted"
)

// scriptDirName is the directory of a pool request's script inside its
// request directory when the script could not be mounted (Script.Files).
const scriptDirName = "script"

// writeScript writes files (relative slash paths, already checked by
// internal/pool) read-only into d's script/ directory, owned by uid when
// it is not 0: the fallback for a pool request whose script could not be
// mounted. The request directory is fresh and its token unknown to the
// sandbox until GO, so nothing there can race the writes; they still go
// through untrusted.Dir like every write into a request directory.
func writeScript(d *untrusted.Dir, files map[string][]byte, uid int) error {
	if err := mkdirOwned(d, scriptDirName, uid); err != nil {
		return err
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := writeScriptFile(d, path.Join(scriptDirName, name), files[name], uid); err != nil {
			return fmt.Errorf("writing script file %q: %w", name, err)
		}
	}
	return nil
}

// writeScriptFile writes one file at rel (slash path below d), making its
// parent directories as needed.
func writeScriptFile(d *untrusted.Dir, rel string, data []byte, uid int) error {
	parts := strings.Split(rel, "/")
	dir := d
	for i, part := range parts[:len(parts)-1] {
		if i > 0 { // script/ itself exists
			if err := mkdirOwned(dir, part, uid); err != nil && !isExist(err) {
				return err
			}
		}
		sub, err := dir.Sub(part)
		if err != nil {
			return err
		}
		if dir != d {
			defer dir.Close()
		}
		dir = sub
	}
	if dir != d {
		defer dir.Close()
	}
	name := parts[len(parts)-1]
	owner := -1 // root's: the daemon's own
	if uid != 0 {
		owner = uid
	}
	return dir.WriteFileAs(name, data, 0o400, owner, owner)
}

func mkdirOwned(d *untrusted.Dir, name string, uid int) error {
	if err := d.Mkdir(name, 0o500|0o200); err != nil {
		return err
	}
	if uid != 0 {
		return d.Chown(name, uid, uid)
	}
	return nil
}

func isExist(err error) bool { return errors.Is(err, os.ErrExist) }
