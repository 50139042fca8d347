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

/**
 * Returns the bundle of the function directory dir (the one holding zygo.toml): a gzip'd tar
 * of its regular files (mode 0755 when executable, else 0644) and directories, paths relative
 * to dir, directories named .git left out. A symbolic link, device, socket or pipe throws an
 * Error naming its path (a bundle must not point outside itself); so does a dir that is not a
 * directory.
 * @param {string} dir
 * @returns {Buffer}
 */
export function packDir(dir) {
  if (!fs.statSync(dir, { throwIfNoEntry: false })?.isDirectory()) {
    throw new Error(`packing ${dir}: not a directory: a function is the directory holding zygo.toml`);
  }
  const blocks = [];
  const walk = (rel) => {
    const names = fs.readdirSync(path.join(dir, rel)).sort();
    for (const name of names) {
      const r = rel ? `${rel}/${name}` : name;
      const st = fs.lstatSync(path.join(dir, r));
      if (st.isDirectory()) {
        if (name === '.git') continue;
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
