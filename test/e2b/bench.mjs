// The E2B rows of `make bench` (scripts/bench-e2b.sh runs this): the same operations through
// E2B's own SDK (npm e2b, against `zygo serve --e2b`) and through Zygo's own Node SDK
// (sdk/node/zygo, on the daemon's unix socket), in one run, one after the other, medians of
// ROUNDS; prints a table with the ratio E2B SDK / Zygo API.
// Env: E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY (the daemon's --e2b), ZYGO_STATE_DIR.
import { Sandbox } from 'e2b'
import { Zygo } from '../../sdk/node/zygo/index.js'

const ROUNDS = Number(process.env.ROUNDS || 5)
const FORK_ROUNDS = Number(process.env.FORK_ROUNDS || 2)
const zygo = new Zygo({ stateDir: process.env.ZYGO_STATE_DIR })
const tenMiB = Buffer.alloc(10 << 20, 0x61)

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]
async function time(fn) {
  const t = performance.now()
  await fn()
  return performance.now() - t
}

async function series(n, fn) {
  const out = []
  for (let i = 0; i < n; i++) out.push(await time(fn))
  return median(out)
}

const rows = []
async function row(what, n, viaE2B, viaZygo) {
  const e = await series(n, viaE2B)
  const z = await series(n, viaZygo)
  rows.push([what, e, z])
  console.error(`  ${what}: e2b ${e.toFixed(1)} ms, zygo ${z.toFixed(1)} ms`)
}

const e2bMade = []
const zygoMade = []
await row('create (template base)', ROUNDS,
  async () => e2bMade.push(await Sandbox.create({ timeoutMs: 600_000 })),
  async () => zygoMade.push(await zygo.sandboxes.create({ template: 'base' })))
const e = e2bMade[0]
const z = zygoMade[0]
await row('commands.run("true") / exec true', ROUNDS * 4,
  () => e.commands.run('true'),
  () => z.exec(['true']))
await row('write a 10 MiB file', ROUNDS,
  () => e.files.write('/tmp/ten', tenMiB),
  () => z.files.write('/tmp/ten', tenMiB))
await row('fork count 11, all running', FORK_ROUNDS,
  async () => { for (const k of await e.fork({ count: 11, timeoutMs: 600_000 })) if (!(k instanceof Error)) await k.kill() },
  async () => { const r = await z.fork(11); await r.dispose() })
for (const s of e2bMade) await s.kill().catch(() => {})
for (const s of zygoMade) await s.kill().catch(() => {})

console.log('| operation | E2B SDK (ms) | Zygo API (ms) | ratio E2B/Zygo |')
console.log('|---|---|---|---|')
for (const [what, a, b] of rows) console.log(`| ${what} | ${a.toFixed(1)} | ${b.toFixed(1)} | ${(a / b).toFixed(2)} |`)
