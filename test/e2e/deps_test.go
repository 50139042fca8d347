package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDependencies deploys functions that ship their dependencies: a Python one with
// python_path = ["vendor"] and [env] PYTHONPATH, a Python one on a virtual environment made
// under /tmp, and a Node one with its node_modules (taken back from the default ignores by
// .zygoignore); without that line node_modules stays on the host and the import fails.
func TestDependencies(t *testing.T) {
	d := startDaemon(t, "")

	t.Run("python_path and PYTHONPATH", func(t *testing.T) {
		dir := writeFunction(t, map[string]string{
			"zygo.toml": "name = \"vendored\"\nruntime = \"python\"\nhandler = \"main:handler\"\npython_path = [\"vendor\"]\n" +
				"[env]\nPYTHONPATH = \"extra\"\n",
			"main.py": "import sys, vendored_dep, env_dep\n" +
				"def handler(event, context):\n    return {'dep': vendored_dep.VALUE, 'env': env_dep.VALUE, 'path': sys.path[:3]}\n",
			"vendor/vendored_dep.py": "VALUE = 'from vendor'\n",
			"extra/env_dep.py":       "VALUE = 'from PYTHONPATH'\n",
			"__pycache__/junk.pyc":   "not byte code: never uploaded",
		})
		d.Up(dir)
		var got struct {
			Dep, Env string
			Path     []string
		}
		d.Invoke("vendored", map[string]any{}, &got)
		if got.Dep != "from vendor" || got.Env != "from PYTHONPATH" || strings.Join(got.Path, ",") != "/code,/code/vendor,/code/extra" {
			t.Errorf("got %+v, want the vendored and PYTHONPATH modules, sys.path /code, /code/vendor, /code/extra", got)
		}
		_, stderr, code := d.CLI("up", writeFunction(t, map[string]string{
			"zygo.toml": "name = \"vendored\"\nruntime = \"python\"\nhandler = \"main:handler\"\npython_path = [\"deps\"]\n",
			"main.py":   "def handler(e, c): return 1\n",
		}))
		if code == 0 || !strings.Contains(stderr, `python_path[0]: "deps" is not a directory of the bundle`) {
			t.Errorf("python_path naming a missing dir: exit %d, stderr %q", code, stderr)
		}
	})

	t.Run("venv under /tmp", func(t *testing.T) {
		base, err := os.MkdirTemp("/tmp", "zygo-venv-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(base) })
		os.Chmod(base, 0o755)
		venv := filepath.Join(base, "venv")
		if out, err := exec.Command("/usr/bin/python3", "-m", "venv", "--without-pip", "--system-site-packages", venv).CombinedOutput(); err != nil {
			t.Fatalf("making a venv (apt-get install -y python3-venv if it is missing): %v\n%s", err, out)
		}
		site, err := filepath.Glob(filepath.Join(venv, "lib", "python3*", "site-packages"))
		if err != nil || len(site) != 1 {
			t.Fatalf("venv site-packages: %v %v", site, err)
		}
		if err := os.WriteFile(filepath.Join(site[0], "venv_only.py"), []byte("VALUE = 'from the venv'\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		d.Up(writeFunction(t, map[string]string{
			"zygo.toml": "name = \"venv\"\nruntime = \"python\"\nhandler = \"main:handler\"\ninterpreter = \"" + venv + "/bin/python\"\n",
			"main.py": "import sys, venv_only, numpy\n" +
				"def handler(event, context):\n    return {'mod': venv_only.VALUE, 'prefix': sys.prefix, 'numpy': numpy.__name__}\n",
			".venv/bin/python": "the host's venv: never uploaded",
		}))
		var got struct{ Mod, Prefix, Numpy string }
		d.Invoke("venv", map[string]any{}, &got)
		if got.Mod != "from the venv" || got.Prefix != venv || got.Numpy != "numpy" {
			t.Errorf("got %+v, want the venv's module, sys.prefix %s and the system's numpy", got, venv)
		}
	})

	t.Run("node_modules", func(t *testing.T) {
		files := map[string]string{
			"zygo.toml":                             "name = \"nodedeps\"\nruntime = \"node\"\nhandler = \"index.js:handler\"\n",
			"index.js":                              "const dep = require('leftpad-ish');\nexports.handler = async () => ({ padded: dep.pad('7', 3) });\n",
			"node_modules/leftpad-ish/package.json": `{"name": "leftpad-ish", "main": "lib.js"}`,
			"node_modules/leftpad-ish/lib.js":       "exports.pad = (s, n) => s.padStart(n, '0');\n",
		}
		_, stderr, code := d.CLI("up", writeFunction(t, files))
		if code == 0 || !strings.Contains(stderr, "leftpad-ish") ||
			!strings.Contains(stderr, "note: node_modules was not uploaded (left out by default): add !node_modules/ to .zygoignore") {
			t.Errorf("node_modules without !node_modules/ in .zygoignore: exit %d, stderr %q; want the import to fail naming the module, and a note", code, stderr)
		}
		files[".zygoignore"] = "!node_modules/\n"
		d.Up(writeFunction(t, files))
		var got struct{ Padded string }
		d.Invoke("nodedeps", map[string]any{}, &got)
		if got.Padded != "007" {
			t.Errorf("got %+v, want padded 007 from node_modules", got)
		}
	})
}
