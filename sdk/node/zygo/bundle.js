// packDir: a function directory as the bundle a deploy uploads (gzip'd tar), as the Go SDK's
// PackDir writes it. node:zlib has gzip; the tar (POSIX ustar, with a PAX record for a path
// over 100 bytes) is written here.

import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';

function octal(n, width) {
  return n.toString(8).padStart(width - 1, '0') + '\0';
}

// header returns one 512-byte ustar header.
function header(name, { size = 0, mode = 0o644, type = '0' } = {}) {
  const b = Buffer.alloc(512);
  b.write(name, 0, 100, 'utf8');
  b.write(octal(mode, 8), 100);
  b.write(octal(0, 8), 108); // uid
  b.write(octal(0, 8), 116); // gid
  b.write(octal(size, 12), 124);
  b.write(octal(0, 12), 136); // mtime
  b.fill(' ', 148, 156); // checksum, counted as spaces
  b.write(type, 156);
  b.write('ustar\0' + '00', 257, 'latin1');
  let sum = 0;
  for (const byte of b) sum += byte;
  b.write(octal(sum, 7) + ' ', 148);
  return b;
}

function pad(n) {
  return Buffer.alloc((512 - (n % 512)) % 512);
}

// entry returns the blocks of one entry: a PAX record first when name is over 100 bytes.
function entry(name, opts, data) {
  const out = [];
  if (Buffer.byteLength(name) > 100) {
    let rec = ` path=${name}\n`;
    let len = Buffer.byteLength(rec);
    len += String(len + String(len).length).length;
    rec = `${len}${rec}`;
    const pax = Buffer.from(rec);
    out.push(header('PaxHeader', { size: pax.length, type: 'x' }), pax, pad(pax.length));
  }
  out.push(header(name.slice(0, 100), opts));
  if (data) out.push(data, pad(data.length));
  return out;
}

/** The file at the top of a function directory listing what packDir leaves out (the Go SDK's IgnoreFile syntax). */
export const IGNORE_FILE = '.zygoignore';

/** Left out of every bundle before IGNORE_FILE is read (`!node_modules/` takes one back). */
export const DEFAULT_IGNORES = Object.freeze(['__pycache__/', '.venv/', 'node_modules/']);

// reEscape writes one character as a RegExp literal, in or out of a class ('u' flag).
const reEscape = (c) => (/^[A-Za-z0-9_]$/.test(c) ? c : `\\u{${c.codePointAt(0).toString(16)}}`);

// nameRegExp compiles one name pattern with Go's path.Match semantics (* and ? never match /,
// [^a-z] negates a class, \ escapes); throws on a malformed pattern.
function nameRegExp(pat) {
  const chars = [...pat];
  const n = chars.length;
  const bad = () => new Error('syntax error in pattern');
  const esc = (j) => {
    if (j >= n || chars[j] === '-' || chars[j] === ']') throw bad();
    if (chars[j] === '\\') {
      j++;
      if (j >= n) throw bad();
    }
    return [chars[j], j + 1];
  };
  let out = '';
  let i = 0;
  while (i < n) {
    const c = chars[i];
    if (c === '*') {
      out += '[^/]*';
      i++;
    } else if (c === '?') {
      out += '[^/]';
      i++;
    } else if (c === '\\') {
      if (i + 1 >= n) throw bad();
      out += reEscape(chars[i + 1]);
      i += 2;
    } else if (c === '[') {
      i++;
      const neg = i < n && chars[i] === '^';
      if (neg) i++;
      const ranges = [];
      for (;;) {
        if (i < n && chars[i] === ']' && ranges.length) {
          i++;
          break;
        }
        let lo;
        let hi;
        [lo, i] = esc(i);
        hi = lo;
        if (i < n && chars[i] === '-') [hi, i] = esc(i + 1);
        ranges.push(lo === hi ? reEscape(lo) : `${reEscape(lo)}-${reEscape(hi)}`);
      }
      out += neg ? `(?:(?!/)[^${ranges.join('')}])` : `[${ranges.join('')}]`;
    } else {
      out += reEscape(c);
      i++;
    }
  }
  return new RegExp(`^(?:${out})$`, 'su');
}

// parseIgnore parses patterns in IGNORE_FILE's syntax; source names the text in errors.
function parseIgnore(text, source) {
  const rules = [];
  text.split('\n').forEach((raw, k) => {
    let line = raw.replace(/[ \t\r]+$/, '');
    if (!line || line.startsWith('#')) return;
    const r = { negate: false, dirOnly: false, anchored: false, parts: [] };
    if (line.startsWith('!')) {
      r.negate = true;
      line = line.slice(1);
    } else if (line.startsWith('\\#') || line.startsWith('\\!')) {
      line = line.slice(1);
    }
    if (line.endsWith('/')) {
      r.dirOnly = true;
      line = line.replace(/\/+$/, '');
    }
    r.anchored = line.includes('/');
    if (line.startsWith('/')) line = line.slice(1);
    if (!line) return;
    try {
      r.parts = line.split('/').map((p) => (p === '**' ? null : nameRegExp(p)));
    } catch (e) {
      throw new Error(`${source} line ${k + 1}: ${JSON.stringify(raw.replace(/\r$/, ''))} is not a valid pattern: ${e.message}`);
    }
    rules.push(r);
  });
  return rules;
}

function matchParts(pat, name) {
  if (!pat.length) return !name.length;
  if (pat[0] === null) {
    for (let i = 0; i <= name.length; i++) if (matchParts(pat.slice(1), name.slice(i))) return true;
    return false;
  }
  return name.length > 0 && pat[0].test(name[0]) && matchParts(pat.slice(1), name.slice(1));
}

// ignored reports whether rel (slash-separated, relative to the function directory) is left
// out: the last rule that matches it decides; zygo.toml never is.
function ignored(rules, rel, isDir) {
  if (rel === 'zygo.toml') return false;
  const name = rel.split('/');
  let out = false;
  for (const r of rules) {
    if (r.dirOnly && !isDir) continue;
    if (matchParts(r.parts, r.anchored ? name : name.slice(-1))) out = !r.negate;
  }
  return out;
}

function loadIgnore(dir) {
  const rules = parseIgnore(DEFAULT_IGNORES.join('\n'), 'defaults');
  let text;
  try {
    text = fs.readFileSync(path.join(dir, IGNORE_FILE), 'utf8');
  } catch (e) {
    if (e.code === 'ENOENT') return rules;
    throw new Error(`reading ${IGNORE_FILE}: ${e.message}`);
  }
  return rules.concat(parseIgnore(text, IGNORE_FILE));
}

const byBytes = (a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b));

/**
 * Returns the bundle of the function directory dir (the one holding zygo.toml): a gzip'd tar
 * of its regular files (mode 0755 when executable, else 0644) and directories, paths relative
 * to dir in lexical depth-first order, leaving out directories named .git, DEFAULT_IGNORES and
 * what its IGNORE_FILE (.zygoignore) names: the entries, modes and order the Go SDK's PackDir
 * writes, so all three deploy it as the same version. A symbolic link, device, socket or pipe
 * that is not left out throws an Error naming its path (a bundle must not point outside
 * itself); so does a dir that is not a directory, and an IGNORE_FILE line that is not a valid
 * pattern (naming the line).
 * @param {string} dir
 * @returns {Buffer}
 */
export function packDir(dir) {
  if (!fs.statSync(dir, { throwIfNoEntry: false })?.isDirectory()) {
    throw new Error(`packing ${dir}: not a directory: a function is the directory holding zygo.toml`);
  }
  let rules;
  try {
    rules = loadIgnore(dir);
  } catch (e) {
    throw new Error(`packing ${dir}: ${e.message}`);
  }
  const blocks = [];
  const walk = (rel) => {
    const names = fs.readdirSync(path.join(dir, rel)).sort(byBytes);
    for (const name of names) {
      const r = rel ? `${rel}/${name}` : name;
      const st = fs.lstatSync(path.join(dir, r));
      if ((st.isDirectory() && name === '.git') || ignored(rules, r, st.isDirectory())) continue;
      if (st.isDirectory()) {
        blocks.push(...entry(`${r}/`, { mode: 0o755, type: '5' }));
        walk(r);
      } else if (st.isFile()) {
        const data = fs.readFileSync(path.join(dir, r));
        blocks.push(...entry(r, { size: data.length, mode: st.mode & 0o111 ? 0o755 : 0o644 }, data));
      } else {
        throw new Error(`packing ${dir}: ${r}: not a regular file or directory (links are not allowed in a function)`);
      }
    }
  };
  walk('');
  blocks.push(Buffer.alloc(1024));
  return zlib.gzipSync(Buffer.concat(blocks));
}
