// Compiled, never run, by `npm run check-types` (pinned devDependencies: TypeScript and Node's
// types): index.d.ts must type a program using the whole surface, in strict mode.
import {
  Zygo, NotFound, BadRequest, type ExecResult, type CodeResult, ApiVersionMismatch, CertificateError, ConfigError, contextPath,
  parseContext,
} from '../index.js';
const c = new Zygo({ stateDir: '/tmp/x' });
async function main(): Promise<void> {
  const d = await c.functions.deploy('dir');
  const v: string = d.version;
  const r = await c.functions.invoke<{ n: number }>('f', { n: 1 });
  const n: number = r.value.n;
  const sb = await c.sandboxes.create({ name: 'a', memory_mib: 256 });
  const e: ExecResult = await sb.exec(['ls'], { stdin: 'x', timeout: 2 });
  for await (const ch of await sb.execStream(['ls'])) { const s: 'stdout' | 'stderr' = ch.stream; void s; }
  const cr: CodeResult = await sb.runCode('1');
  const cp = await sb.checkpoint('t');
  const f = await sb.fork(2, cp);
  for (const k of f.sandboxes) await k.generation();
  await sb.rollback(cp.id);
  await c.sandboxes.use({}, async (s) => s.files.read('/x'));
  try { await sb.kill(); } catch (err) { if (err instanceof NotFound || err instanceof BadRequest || err instanceof ApiVersionMismatch) console.log(err.code, err.status, err.message); }
  const remote = new Zygo({ addr: 'https://h:1', ca: 'ca.pem', serverName: 'h', token: 't' });
  const from: string | undefined = remote.target.tokenFrom;
  const file: string | null = contextPath();
  const addr: string | undefined = parseContext('address = "h:1"', 'F').address;
  try { await remote.status(); } catch (err) { if (err instanceof CertificateError) console.log(err.where); else if (err instanceof ConfigError) throw err; }
  void v; void n; void e; void cr; void from; void file; void addr;
}
void main;
