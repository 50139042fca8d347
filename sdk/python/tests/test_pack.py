"""pack_dir without a daemon: .zygoignore's syntax, the default ignores, modes and order as the
Go SDK's PackDir writes them (sdk/go/zygo/ignore_test.go holds the same cases); that the Go
SDK packs the same directory as the same version is tested against a real daemon in
test_client.py.

    cd sdk/python && /usr/bin/python3 -m unittest discover -s tests
"""

import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from zygo.functions import pack_dir  # noqa: E402

#: What zygoignore_dir's directory packs as: (name, mode) in the Go SDK's order.
ZYGOIGNORE_DIR_PACKED = [
    (".zygoignore", 0o644), ("bin/", 0o755), ("bin/run.sh", 0o755), ("data/", 0o755), ("data/keep.txt", 0o644),
    ("lib/", 0o755), ("lib/secret_stuff", 0o644), ("lib/sub/", 0o755), ("lib/sub/x", 0o644), ("main.py", 0o644),
    ("sub/", 0o755), ("sub/y", 0o644), ("zygo.toml", 0o644),
]


def write_files(d, files):
    for name, body in files.items():
        p = os.path.join(d, name)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(body)


def zygoignore_dir(name):
    """A Python function directory named name (removed at the end of the module) with a
    .zygoignore (data/*, !data/keep.txt, secret_stuff/, *.log, the anchored sub/x), a real
    .venv made by /usr/bin/python3 -m venv (symbolic links in it), node_modules/,
    __pycache__/, .git/, a link inside the ignored secret_stuff/ and an executable bin/run.sh;
    it packs as ZYGOIGNORE_DIR_PACKED."""
    d = tempfile.mkdtemp(prefix="zpy-ign-")
    unittest.addModuleCleanup(shutil.rmtree, d, ignore_errors=True)
    write_files(d, {
        "zygo.toml": f'name = "{name}"\nruntime = "python"\nhandler = "main:handler"\n',
        "main.py": "def handler(event, context):\n    return {'ok': True}\n",
        ".zygoignore": "# build output and secrets stay home\ndata/*\n!data/keep.txt\nsecret_stuff/\n*.log\nsub/x\n",
        "data/a.bin": "big", "data/keep.txt": "kept", "data/nested/b.bin": "big",
        "secret_stuff/key.pem": "SECRET", "lib/secret_stuff": "a file, not a directory",
        "app.log": "log", "lib/deep.log": "log", "sub/x": "anchored", "sub/y": "y", "lib/sub/x": "not anchored here",
        "node_modules/dep/index.js": "x", "__pycache__/main.cpython-311.pyc": "x", "lib/__pycache__/a.pyc": "x",
        ".git/HEAD": "ref", "bin/run.sh": "#!/bin/sh\n",
    })
    os.chmod(os.path.join(d, "bin/run.sh"), 0o700)
    os.symlink("/etc/passwd", os.path.join(d, "secret_stuff", "passwd"))
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", os.path.join(d, ".venv")], check=True)
    if not os.path.islink(os.path.join(d, ".venv", "bin", "python")):
        raise AssertionError("python3 -m venv made no symbolic link: the test would not test links in .venv")
    return d


def packed(d):
    """The (name, mode) entries of pack_dir(d), in the tar's order."""
    with tarfile.open(fileobj=io.BytesIO(pack_dir(d)), mode="r:gz") as tr:
        return [(m.name + "/" if m.isdir() else m.name, m.mode) for m in tr.getmembers()]


class PackDirTest(unittest.TestCase):
    def test_zygoignore_defaults_and_links_in_ignored_dirs(self):
        self.assertEqual(packed(zygoignore_dir("pyign")), ZYGOIGNORE_DIR_PACKED)

    def test_default_ignores_and_taking_node_modules_back(self):
        d = tempfile.mkdtemp(prefix="zpy-p-")
        self.addCleanup(shutil.rmtree, d)
        write_files(d, {"zygo.toml": "x", "main.py": "x", "__pycache__/main.cpython-311.pyc": "x",
                        "lib/__pycache__/a.pyc": "x", "lib/a.py": "x", ".venv/bin/python": "x",
                        "node_modules/dep/index.js": "x", ".git/HEAD": "x"})
        self.assertEqual([n for n, _ in packed(d)], ["lib/", "lib/a.py", "main.py", "zygo.toml"])
        write_files(d, {".zygoignore": "# ship the Node packages\n!node_modules/\n"})
        self.assertEqual([n for n, _ in packed(d)], [".zygoignore", "lib/", "lib/a.py", "main.py", "node_modules/",
                                                     "node_modules/dep/", "node_modules/dep/index.js", "zygo.toml"])

    def test_the_gitignore_subset(self):
        # sdk/go/zygo/ignore_test.go TestPackDirZygoignore, case for case.
        d = tempfile.mkdtemp(prefix="zpy-p-")
        self.addCleanup(shutil.rmtree, d)
        write_files(d, {"zygo.toml": "x", "main.py": "x", "notes.md": "x", "docs/a.md": "x", "docs/deep/b.md": "x",
                        "docs/keep.txt": "x", "build/out.o": "x", "src/build/gen.py": "x", "data/big.bin": "x",
                        "data/small.bin": "x", "tests/test_a.py": "x", "lib/tests": "x", "#hash.py": "x",
                        "n[1].txt": "x", "n2.txt": "x"})
        write_files(d, {".zygoignore": "\n".join([
            "# comments and blank lines are skipped", "",
            "*.md        ", "!docs/**/b.md", "/build", "data/*.bin", "!data/small.bin", "tests/", "\\#hash.py",
            "zygo.toml", "n[^1].txt", "n\\[1\\].t?t",
        ])})
        self.assertEqual(sorted(n for n, _ in packed(d)), sorted([
            ".zygoignore", "data/", "data/small.bin", "docs/", "docs/deep/", "docs/deep/b.md", "docs/keep.txt",
            "lib/", "lib/tests", "main.py", "src/", "src/build/", "src/build/gen.py", "zygo.toml"]))

    def test_a_bad_pattern_names_its_line(self):
        d = tempfile.mkdtemp(prefix="zpy-p-")
        self.addCleanup(shutil.rmtree, d)
        for bad in ("[z-", "[]", "a\\", "[a", "[]a]", "[a-]"):
            write_files(d, {"zygo.toml": "x", ".zygoignore": f"ok\n{bad}\n"})
            with self.assertRaisesRegex(ValueError, r"\.zygoignore line 2: .* is not a valid pattern"):
                pack_dir(d)

    def test_a_link_not_left_out_is_refused(self):
        d = tempfile.mkdtemp(prefix="zpy-p-")
        self.addCleanup(shutil.rmtree, d)
        write_files(d, {"zygo.toml": "x"})
        os.symlink("/usr", os.path.join(d, "venv-link"))
        with self.assertRaisesRegex(ValueError, "venv-link: not a regular file"):
            pack_dir(d)
        write_files(d, {".zygoignore": "venv-link\n"})
        self.assertEqual([n for n, _ in packed(d)], [".zygoignore", "zygo.toml"])


if __name__ == "__main__":
    unittest.main()
