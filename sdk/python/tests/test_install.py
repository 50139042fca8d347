"""`pip install ./sdk/python` where no package index is reachable: into a fresh venv of each
Python here (Debian's /usr/bin/python3 and the python3 first on PATH), with --no-index and no
pip configuration, then imported from outside the source tree.

    cd sdk/python && /usr/bin/python3 -m unittest discover -s tests
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

SDK = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def pythons():
    """The distinct interpreters to install with: this one, /usr/bin/python3, and the
    python3 first on PATH."""
    seen, out = set(), []
    for p in (sys.executable, "/usr/bin/python3", shutil.which("python3")):
        if p and os.path.exists(p):
            real = subprocess.run([p, "-c", "import sys; print(sys.base_prefix, sys.version)"],
                                  capture_output=True, text=True, check=True).stdout
            if real not in seen:
                seen.add(real)
                out.append(p)
    return out


class InstallTest(unittest.TestCase):
    def test_pip_install_with_no_index(self):
        for py in pythons():
            with self.subTest(python=py):
                d = tempfile.mkdtemp(prefix="zpy-venv-")
                self.addCleanup(shutil.rmtree, d)
                r = subprocess.run([py, "-m", "venv", os.path.join(d, "venv")], capture_output=True, text=True)
                self.assertEqual(r.returncode, 0, f"{py} -m venv failed (Debian: apt-get install python3-venv): {r.stderr}")
                vpy = os.path.join(d, "venv", "bin", "python")
                env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
                env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
                r = subprocess.run([vpy, "-m", "pip", "install", "--no-index", SDK],
                                   capture_output=True, text=True, env=env, cwd=d)
                self.assertEqual(r.returncode, 0, f"pip install failed:\n{r.stdout}\n{r.stderr}")
                r = subprocess.run([vpy, "-c", "import zygo, zygo_sandbox; print(zygo.__file__); "
                                    "print(zygo.Zygo(state_dir='/s').where)"],
                                   capture_output=True, text=True, env=env, cwd=d, check=True)
                path, where = r.stdout.split()
                self.assertTrue(path.startswith(os.path.join(d, "venv")), path)
                self.assertEqual(where, "/s/zygo.sock")
                self.assertFalse(os.path.exists(os.path.join(SDK, "build")), "the build left files in the tree")


if __name__ == "__main__":
    unittest.main()
