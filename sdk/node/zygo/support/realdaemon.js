// A real `zygo serve` for the client's tests: the repository's bin/zygo (built with `make
// build` when missing) on a temporary state dir, as root, with real runsc and bwrap. A missing
// tool fails the tests with how to install it; nothing is skipped.

import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { FailedPrecondition, Unreachable, Zygo } from '../index.js';

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..', '..');

function which(cmd) {
  return (process.env.PATH ?? '').split(':').map((d) => path.join(d, cmd)).find((p) => fs.existsSync(p));
}

/** Throws, saying how to install it, unless this runs as root with runsc and bwrap. */
export function checkTools() {
  if (process.geteuid() !== 0) throw new Error('these tests start a Zygo daemon with gVisor sandboxes: run them as root');
  if (!fs.existsSync('/usr/local/bin/runsc') && !which('runsc')) {
    throw new Error('runsc not found: install the pinned build with `sudo scripts/install-runsc.sh` (or `make deps`)');
  }
  if (!which('bwrap')) throw new Error('bwrap not found: `apt-get install bubblewrap` (or `make deps`)');
}

/** $ZYGO_BIN, else the repository's bin/zygo, built with `make build` when missing. */
export function zygoBin() {
  const bin = process.env.ZYGO_BIN || path.join(REPO, 'bin', 'zygo');
  if (!fs.existsSync(bin)) execFileSync('make', ['build'], { cwd: REPO, stdio: 'inherit' });
  return bin;
}

async function freePort() {
  const srv = net.createServer();
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  const { port } = srv.address();
  await new Promise((r) => srv.close(r));
  return port;
}

/**
 * The processes (a runsc, a zygote) whose command line names stateDir, and the mounts under
 * it: what a daemon that stopped cleanly leaves none of.
 */
export function leftovers(stateDir) {
  const out = [];
  for (const pid of fs.readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    let cmd;
    try {
      cmd = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ').trim();
    } catch {
      continue;
    }
    if (cmd.includes(`${stateDir}/`) || cmd.endsWith(stateDir)) out.push(`pid ${pid}: ${cmd.slice(0, 200)}`);
  }
  for (const line of fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const mnt = line.split(' ')[4];
    if (mnt?.startsWith(`${stateDir}/`)) out.push(`mount ${mnt}`);
  }
  return out;
}

/**
 * Writes a self-signed certificate for 127.0.0.1 (ECDSA P-256, a day) and its key into dir as
 * NAME.pem and NAME.key with openssl; returns [cert, key].
 */
export function selfSigned(dir, name = 'cert') {
  if (!which('openssl')) throw new Error('openssl not found: `apt-get install openssl` (the tests make a TLS certificate with it)');
  const cert = path.join(dir, `${name}.pem`);
  const key = path.join(dir, `${name}.key`);
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-subj', '/CN=zygo',
    '-addext', 'subjectAltName=IP:127.0.0.1', '-days', '1', '-keyout', key, '-out', cert], { stdio: 'pipe' });
  return [cert, key];
}

/**
 * `zygo serve --state-dir STATE --no-network --listen 127.0.0.1:PORT`, with --tls-cert and
 * --tls-key when tls is [cert, key].
 */
export class Daemon {
  constructor({ tls } = {}) {
    this.tls = tls;
  }

  async start() {
    checkTools();
    this.bin = zygoBin();
    // Short: the unix socket's path under it is limited to 108 bytes.
    this.stateDir = fs.mkdtempSync('/tmp/zjs-');
    this.addr = `127.0.0.1:${await freePort()}`;
    this.logPath = path.join(os.tmpdir(), `${path.basename(this.stateDir)}.log`);
    const log = fs.openSync(this.logPath, 'w');
    const tlsArgs = this.tls ? ['--tls-cert', this.tls[0], '--tls-key', this.tls[1]] : [];
    this.proc = spawn(this.bin, ['serve', '--state-dir', this.stateDir, '--no-network', '--listen', this.addr, ...tlsArgs],
      { stdio: ['ignore', log, log], detached: true });
    this.exited = new Promise((r) => this.proc.once('exit', r));
    const client = this.client();
    const deadline = Date.now() + 120_000;
    for (;;) {
      try {
        await client.status();
        return;
      } catch (err) {
        if (!(err instanceof Unreachable) || this.proc.exitCode !== null || Date.now() > deadline) {
          throw new Error(`zygo serve did not answer (${err.message}); its log:\n${this.log()}`);
        }
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  }

  /** A client of the daemon's unix socket. */
  client() {
    return new Zygo({ socketPath: path.join(this.stateDir, 'zygo.sock') });
  }

  /** Creates a token on the unix socket with `zygo token create` and returns its secret. */
  createToken(name) {
    const out = execFileSync(this.bin, ['token', 'create', '--name', name, '--state-dir', this.stateDir, '-o', 'json'],
      { env: { ...process.env, XDG_CONFIG_HOME: this.stateDir } });
    return JSON.parse(out).secret;
  }

  log() {
    return fs.readFileSync(this.logPath, 'utf8').slice(-8000);
  }

  /** Removes every sandbox and checkpoint, then stops the daemon and removes its state dir. */
  async stop() {
    if (!this.proc) return;
    const c = this.client();
    try {
      for (const sb of (await c.sandboxes.list()).reverse()) await sb.dispose();
      for (let i = 0; i < 8; i++) { // descendants before ancestors
        const cps = await c.checkpoints.list();
        if (!cps.length) break;
        for (const cp of cps.reverse()) {
          await c.checkpoints.remove(cp).catch((err) => { if (!(err instanceof FailedPrecondition)) throw err; });
        }
      }
    } finally {
      this.proc.kill('SIGTERM');
      const timer = setTimeout(() => this.proc.kill('SIGKILL'), 60_000);
      await this.exited;
      clearTimeout(timer);
      const left = leftovers(this.stateDir);
      fs.rmSync(this.logPath, { force: true });
      fs.rmSync(this.stateDir, { recursive: true, force: true });
      if (left.length) throw new Error(`left behind after the daemon stopped: ${left.join('; ')}`);
    }
  }
}
