// The function directory the pack tests share with sdk/python/tests/test_pack.py: a
// .zygoignore, a real .venv with its symbolic links, node_modules/, __pycache__/ and .git/,
// and what the Go SDK's PackDir packs of it.

import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/** What zygoignoreDir's directory packs as: [name, mode] in the Go SDK's order. */
export const ZYGOIGNORE_DIR_PACKED = [
  ['.zygoignore', 0o644], ['bin/', 0o755], ['bin/run.sh', 0o755], ['data/', 0o755], ['data/keep.txt', 0o644],
  ['lib/', 0o755], ['lib/secret_stuff', 0o644], ['lib/sub/', 0o755], ['lib/sub/x', 0o644], ['main.py', 0o644],
  ['sub/', 0o755], ['sub/y', 0o644], ['zygo.toml', 0o644],
];

/** Writes files ({relative name: body}) under dir, making their directories. */
export function writeFiles(dir, files) {
  for (const [name, body] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(dir, name)), { recursive: true });
    fs.writeFileSync(path.join(dir, name), body);
  }
}

/**
 * Makes a Python function directory named name under os.tmpdir() (the caller removes it) with
 * a .zygoignore (data/*, !data/keep.txt, secret_stuff/, *.log, the anchored sub/x), a real
 * .venv made by /usr/bin/python3 -m venv (symbolic links in it), node_modules/, __pycache__/,
 * .git/, a link inside the ignored secret_stuff/ and an executable bin/run.sh; it packs as
 * ZYGOIGNORE_DIR_PACKED. Throws when venv makes no link (the test would test nothing).
 * @param {string} name
 * @returns {string} the directory
 */
export function zygoignoreDir(name) {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'zjs-ign-'));
  writeFiles(d, {
    'zygo.toml': `name = "${name}"\nruntime = "python"\nhandler = "main:handler"\n`,
    'main.py': "def handler(event, context):\n    return {'ok': True}\n",
    '.zygoignore': '# build output and secrets stay home\ndata/*\n!data/keep.txt\nsecret_stuff/\n*.log\nsub/x\n',
    'data/a.bin': 'big', 'data/keep.txt': 'kept', 'data/nested/b.bin': 'big',
    'secret_stuff/key.pem': 'SECRET', 'lib/secret_stuff': 'a file, not a directory',
    'app.log': 'log', 'lib/deep.log': 'log', 'sub/x': 'anchored', 'sub/y': 'y', 'lib/sub/x': 'not anchored here',
    'node_modules/dep/index.js': 'x', '__pycache__/main.cpython-311.pyc': 'x', 'lib/__pycache__/a.pyc': 'x',
    '.git/HEAD': 'ref', 'bin/run.sh': '#!/bin/sh\n',
  });
  fs.chmodSync(path.join(d, 'bin', 'run.sh'), 0o700);
  fs.symlinkSync('/etc/passwd', path.join(d, 'secret_stuff', 'passwd'));
  execFileSync('/usr/bin/python3', ['-m', 'venv', '--without-pip', path.join(d, '.venv')]);
  if (!fs.lstatSync(path.join(d, '.venv', 'bin', 'python')).isSymbolicLink()) {
    throw new Error('python3 -m venv made no symbolic link: the test would not test links in .venv');
  }
  return d;
}

const MODES = { 'drwxr-xr-x': 0o755, '-rwxr-xr-x': 0o755, '-rw-r--r--': 0o644 };

/**
 * The [name, mode] entries of a bundle (gzip'd tar) in its order, read by tar(1); a mode
 * other than 0755 or 0644 comes back as its ls string.
 * @param {Buffer} bundle
 * @returns {Array<[string, number|string]>}
 */
export function bundleEntries(bundle) {
  const listing = execFileSync('tar', ['tvzf', '-'], { input: bundle }).toString().trim();
  return listing ? listing.split('\n').map((l) => {
    const f = l.split(/\s+/);
    return [f[f.length - 1], MODES[f[0]] ?? f[0]];
  }) : [];
}
