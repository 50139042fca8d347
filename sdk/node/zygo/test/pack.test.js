// packDir without a daemon: .zygoignore's syntax, the default ignores, modes and order as the
// Go SDK's PackDir writes them (sdk/go/zygo/ignore_test.go holds the same cases); that the Go
// SDK packs the same directory as the same version is tested against a real daemon in
// client.test.js.
//
//   cd sdk/node/zygo && node --test test/

import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import { packDir } from '../index.js';
import { ZYGOIGNORE_DIR_PACKED, bundleEntries, writeFiles, zygoignoreDir } from '../support/zygoignore.js';

const dirs = [];
after(() => dirs.forEach((d) => fs.rmSync(d, { recursive: true, force: true })));

function tempDir() {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'zjs-p-'));
  dirs.push(d);
  return d;
}

const names = (d) => bundleEntries(packDir(d)).map(([n]) => n);

describe('packDir and .zygoignore', () => {
  test('.zygoignore, the defaults, and links in ignored directories', () => {
    const d = zygoignoreDir('jsign');
    dirs.push(d);
    assert.deepEqual(bundleEntries(packDir(d)), ZYGOIGNORE_DIR_PACKED);
  });

  test('the default ignores, and taking node_modules back', () => {
    const d = tempDir();
    writeFiles(d, {
      'zygo.toml': 'x', 'main.py': 'x', '__pycache__/main.cpython-311.pyc': 'x', 'lib/__pycache__/a.pyc': 'x',
      'lib/a.py': 'x', '.venv/bin/python': 'x', 'node_modules/dep/index.js': 'x', '.git/HEAD': 'x',
    });
    assert.deepEqual(names(d), ['lib/', 'lib/a.py', 'main.py', 'zygo.toml']);
    writeFiles(d, { '.zygoignore': '# ship the Node packages\n!node_modules/\n' });
    assert.deepEqual(names(d), ['.zygoignore', 'lib/', 'lib/a.py', 'main.py', 'node_modules/', 'node_modules/dep/',
      'node_modules/dep/index.js', 'zygo.toml']);
  });

  test('the gitignore subset (the Go SDK test, case for case)', () => {
    const d = tempDir();
    writeFiles(d, {
      'zygo.toml': 'x', 'main.py': 'x', 'notes.md': 'x', 'docs/a.md': 'x', 'docs/deep/b.md': 'x', 'docs/keep.txt': 'x',
      'build/out.o': 'x', 'src/build/gen.py': 'x', 'data/big.bin': 'x', 'data/small.bin': 'x', 'tests/test_a.py': 'x',
      'lib/tests': 'x', '#hash.py': 'x', 'n[1].txt': 'x', 'n2.txt': 'x',
    });
    writeFiles(d, {
      '.zygoignore': ['# comments and blank lines are skipped', '', '*.md        ', '!docs/**/b.md', '/build',
        'data/*.bin', '!data/small.bin', 'tests/', '\\#hash.py', 'zygo.toml', 'n[^1].txt', 'n\\[1\\].t?t'].join('\n'),
    });
    assert.deepEqual(names(d).sort(), ['.zygoignore', 'data/', 'data/small.bin', 'docs/', 'docs/deep/', 'docs/deep/b.md',
      'docs/keep.txt', 'lib/', 'lib/tests', 'main.py', 'src/', 'src/build/', 'src/build/gen.py', 'zygo.toml'].sort());
  });

  test('a bad pattern names its line', () => {
    const d = tempDir();
    for (const bad of ['[z-', '[]', 'a\\', '[a', '[]a]', '[a-]']) {
      writeFiles(d, { 'zygo.toml': 'x', '.zygoignore': `ok\n${bad}\n` });
      assert.throws(() => packDir(d), /\.zygoignore line 2: .* is not a valid pattern/, bad);
    }
  });

  test('a link not left out is refused; left out, it is not visited', () => {
    const d = tempDir();
    writeFiles(d, { 'zygo.toml': 'x' });
    fs.symlinkSync('/usr', path.join(d, 'venv-link'));
    assert.throws(() => packDir(d), /venv-link: not a regular file/);
    writeFiles(d, { '.zygoignore': 'venv-link\n' });
    assert.deepEqual(names(d), ['.zygoignore', 'zygo.toml']);
  });
});
