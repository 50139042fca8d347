'use strict';
// Loading the user's handler (start-up step "import"): FILE:EXPORT under the code directory.
//
// Module kind follows Node's own rules: `.mjs` is an ES module, `.cjs` is CommonJS, and `.js`
// is an ES module when the nearest package.json (searching upwards from the file) says
// "type": "module". CommonJS is loaded with require, ES modules with import() of a file URL.
//
// Export resolution, the same for both kinds:
//   1. `mod[EXPORT]`, if it is a function;
//   2. else `mod.default[EXPORT]`, if `default` is an object (or function) holding a function
//      there: `export default { handler }` in ESM, or transpiled ESM in CommonJS;
//   3. for CommonJS only, EXPORT "default" also names `module.exports` itself when that is a
//      function (what import() would give).
// The handler is called with `this` set to the object it was found on (module.exports or the
// default object), or undefined for an ES module's own export.

const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');
const { pathToFileURL } = require('url');

/**
 * Return {file, exportName} from "FILE:EXPORT" (the last colon splits). Throws TypeError when
 * either part is empty.
 */
function parseSpec(spec) {
  const i = typeof spec === 'string' ? spec.lastIndexOf(':') : -1;
  if (i <= 0 || i === spec.length - 1) {
    throw new TypeError(`handler ${JSON.stringify(spec)} is not of the form FILE:EXPORT`);
  }
  return { file: spec.slice(0, i), exportName: spec.slice(i + 1) };
}

/**
 * Return the absolute path of `file` under `codeDir`. Throws TypeError if it is absolute or
 * leads outside codeDir (lexically; the sandbox decides what a symlink may reach).
 */
function resolveFile(codeDir, file) {
  const root = path.resolve(codeDir);
  const full = path.resolve(root, file);
  if (path.isAbsolute(file) || !full.startsWith(root + path.sep)) {
    throw new TypeError(`handler file ${JSON.stringify(file)} is not inside ${root}`);
  }
  return full;
}

/**
 * Return "esm" or "cjs" for the file at `full`. A package.json that cannot be read or parsed
 * counts as "cjs": require then reports Node's own error for it. Never throws.
 */
function moduleKind(full) {
  if (full.endsWith('.mjs')) return 'esm';
  if (full.endsWith('.cjs') || !full.endsWith('.js')) return 'cjs';
  for (let dir = path.dirname(full); ; dir = path.dirname(dir)) {
    const pkg = path.join(dir, 'package.json');
    if (fs.existsSync(pkg)) {
      try {
        return JSON.parse(fs.readFileSync(pkg, 'utf8')).type === 'module' ? 'esm' : 'cjs';
      } catch {
        return 'cjs';
      }
    }
    if (path.dirname(dir) === dir) return 'cjs';
  }
}

/**
 * Load the handler named by `spec` from `codeDir` and return a function (event, context) that
 * calls it with the right `this`. Throws whatever loading throws (the module's own errors,
 * SyntaxError, ERR_MODULE_NOT_FOUND...), and TypeError for a malformed spec, a file outside
 * codeDir, or an export that is missing or not a function.
 */
async function loadHandler(codeDir, spec) {
  const { file, exportName } = parseSpec(spec);
  const full = resolveFile(codeDir, file);
  let mod;
  let found;
  if (moduleKind(full) === 'esm') {
    try {
      mod = await import(pathToFileURL(full).href);
    } catch (err) {
      throw withSyntaxLocation(err, full);
    }
    found = findExport(mod, exportName, undefined);
  } else {
    mod = require(full);
    found = findExport(mod, exportName, mod);
    if (!found && exportName === 'default' && typeof mod === 'function') {
      found = { fn: mod, self: undefined };
    }
  }
  if (!found) throw missingExport(spec, file, exportName, mod);
  const { fn, self } = found;
  return (event, context) => fn.call(self, event, context);
}

/** Return {fn, self} for `name` in `mod` (rules 1 and 2 above), or null. Never throws. */
function findExport(mod, name, self) {
  try {
    if (mod == null) return null;
    if (typeof mod[name] === 'function') return { fn: mod[name], self };
    const def = mod.default;
    if (def && (typeof def === 'object' || typeof def === 'function') && def !== mod &&
        typeof def[name] === 'function') {
      return { fn: def[name], self: def };
    }
  } catch {
    // a throwing getter or a Proxy: treated as missing
  }
  return null;
}

/** Return the TypeError for an export that is missing or not a function. */
function missingExport(spec, file, name, mod) {
  let what = 'has no export';
  let names = '';
  try {
    if (mod != null && name in Object(mod)) {
      what = `exports a ${mod[name] === null ? 'null' : typeof mod[name]}, not a function, as`;
    }
    if (mod != null) names = Object.keys(Object(mod)).slice(0, 20).join(', ');
  } catch {
    // best effort only
  }
  const listed = names ? ` (its exports: ${names})` : '';
  return new TypeError(`handler ${JSON.stringify(spec)}: ${file} ${what} ` +
    `${JSON.stringify(name)}${listed}`);
}

/**
 * Return `err`, with the file:line block of `node --check` prepended to its stack when it is a
 * SyntaxError whose stack names no place (import() of an ES module reports none). Only the
 * handler file itself is checked. Never throws.
 */
function withSyntaxLocation(err, full) {
  try {
    if (!(err instanceof SyntaxError) || String(err.stack).includes(full)) return err;
    const check = spawnSync(process.execPath, ['--check', full],
      { encoding: 'utf8', timeout: 10000, stdio: ['ignore', 'ignore', 'pipe'] });
    const where = String(check.stderr || '').split(/\n(?=SyntaxError)/)[0];
    if (check.status !== 0 && where.startsWith(full + ':')) {
      err.stack = where.replace(/\s+$/, '') + '\n\n' + err.stack;
    }
  } catch {
    // the location is a nicety
  }
  return err;
}

module.exports = { parseSpec, resolveFile, moduleKind, loadHandler, findExport };
