// E2B's own SDKs (npm e2b and @e2b/code-interpreter, unchanged) against a real
// `zygo serve --e2b`: E2B_API_URL and E2B_SANDBOX_URL point at it, E2B_API_KEY is a Zygo API
// token written e2b_… . test/e2e_sandbox/e2b_test.go starts the daemon, runs `npm ci` here
// and then `node --test` on this file; run by hand, set those three variables first.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import {
  Sandbox as Base,
  CommandExitError,
  SandboxNotFoundError,
  NotFoundError,
  TimeoutError,
  AuthenticationError,
} from 'e2b'
import { Sandbox } from '@e2b/code-interpreter'

for (const v of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']) {
  assert.ok(process.env[v], `${v} must be set (test/e2e_sandbox/e2b_test.go sets it)`)
}

const made = []
const track = (sbx) => { made.push(sbx.sandboxId); return sbx }
after(async () => {
  for (const id of made) await Base.kill(id).catch(() => {})
})

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

// identity returns what makes a copy itself: generation, hostname, machine-id, a kernel draw.
async function identity(sbx) {
  const r = await sbx.commands.run(
    'printf "%s\\n" "$(cat /run/zygo/generation)" "$(hostname)" "$(cat /etc/machine-id)" "$(head -c 16 /dev/urandom | od -An -tx1 | tr -d \' \\n\')"',
    { user: 'root' })
  const [generation, hostname, machineId, draw] = r.stdout.trim().split('\n').map((s) => s.trim())
  return { generation, hostname, machineId, draw }
}

let sbx // the sandbox most tests share, from the base template

test('create (the code interpreter\'s default template, as base): user, home, Python 3 and Node', async () => {
  sbx = track(await Sandbox.create({ timeoutMs: 600_000, metadata: { suite: 'zygo-e2b' } }))
  assert.match(sbx.sandboxId, /^sb-/)
  const who = await sbx.commands.run('id -un; echo $HOME; pwd; python3 -c "print(6*7)"; node -e "console.log(6*7)"')
  assert.deepEqual(who.stdout.trim().split('\n'), ['user', '/home/user', '/home/user', '42', '42'])
  const info = await Base.getInfo(sbx.sandboxId)
  assert.equal(info.state, 'running')
  assert.equal(info.templateId, 'code-interpreter-v1') // @e2b/code-interpreter's default template
  assert.deepEqual(info.metadata, { suite: 'zygo-e2b' })
  const listed = await Base.list({ query: { metadata: { suite: 'zygo-e2b' }, state: ['running'] } }).nextItems()
  assert.ok(listed.some((s) => s.sandboxId === sbx.sandboxId), 'listed by its metadata')
  const none = await Base.list({ query: { metadata: { suite: 'other' } } }).nextItems()
  assert.ok(!none.some((s) => s.sandboxId === sbx.sandboxId), 'not listed under other metadata')
})

test('commands: exit codes, streaming, background, stdin, kill', async () => {
  const ok = await sbx.commands.run('echo out; echo err >&2')
  assert.equal(ok.exitCode, 0)
  assert.equal(ok.stdout, 'out\n')
  assert.equal(ok.stderr, 'err\n')

  await assert.rejects(sbx.commands.run('echo no >&2; exit 3'), (e) => {
    assert.ok(e instanceof CommandExitError, `want CommandExitError, got ${e?.name}: ${e?.message}`)
    assert.equal(e.exitCode, 3)
    assert.equal(e.stderr, 'no\n')
    return true
  })

  const chunks = []
  const t0 = Date.now()
  let firstAt = 0
  await sbx.commands.run('for i in 1 2 3; do echo line$i; sleep 0.3; done', {
    onStdout: (d) => { if (!firstAt) firstAt = Date.now(); chunks.push(d) },
  })
  assert.equal(chunks.join(''), 'line1\nline2\nline3\n')
  assert.ok(firstAt - t0 < Date.now() - t0 - 300, 'the first line arrived before the command ended (streamed)')

  const bg = await sbx.commands.run('sleep 600', { background: true })
  assert.ok(bg.pid > 0)
  const procs = await sbx.commands.list()
  assert.ok(procs.some((p) => p.pid === bg.pid), 'the background command is listed')
  assert.equal(await sbx.commands.kill(bg.pid), true)
  const end = await bg.wait().catch((e) => e)
  assert.ok(end instanceof CommandExitError, 'a killed command ends as CommandExitError')

  const cat = await sbx.commands.run('cat', { background: true, stdin: true })
  await sbx.commands.sendStdin(cat.pid, 'hello stdin\n')
  await sbx.commands.closeStdin(cat.pid)
  const catEnd = await cat.wait()
  assert.equal(catEnd.stdout, 'hello stdin\n')

  await assert.rejects(sbx.commands.run('sleep 30', { timeoutMs: 1000 }), (e) => e instanceof TimeoutError)
})

test('files: write, read, list, exists, makeDir, rename, remove, watchDir; missing file', async () => {
  await sbx.files.write('/home/user/notes.txt', 'zygo\n')
  assert.equal(await sbx.files.read('/home/user/notes.txt'), 'zygo\n')
  assert.equal(await sbx.files.exists('/home/user/notes.txt'), true)
  assert.equal(await sbx.files.makeDir('/home/user/dir/sub'), true)
  assert.equal(await sbx.files.makeDir('/home/user/dir/sub'), false)
  const names = (await sbx.files.list('/home/user')).map((e) => e.name)
  assert.ok(names.includes('notes.txt') && names.includes('dir'), `list: ${names}`)
  const moved = await sbx.files.rename('/home/user/notes.txt', '/home/user/dir/notes.txt')
  assert.equal(moved.path, '/home/user/dir/notes.txt')
  assert.equal(await sbx.files.exists('/home/user/notes.txt'), false)

  const events = []
  const watcher = await sbx.files.watchDir('/home/user/dir', (ev) => events.push(ev))
  await sbx.files.write('/home/user/dir/new.txt', 'x')
  for (let i = 0; i < 50 && !events.some((e) => e.name === 'new.txt'); i++) await sleep(100)
  await watcher.stop()
  assert.ok(events.some((e) => e.name === 'new.txt'), `watchDir saw: ${JSON.stringify(events)}`)

  await sbx.files.remove('/home/user/dir/new.txt')
  assert.equal(await sbx.files.exists('/home/user/dir/new.txt'), false)
  await assert.rejects(sbx.files.read('/home/user/nope.txt'), (e) => e instanceof NotFoundError)
})

test('files as user have user\'s permissions: /etc and /root refused, a root-only file unreadable', async () => {
  const denied = (e) => /^403: |permission denied/i.test(e.message)
  await assert.rejects(sbx.files.write('/etc/sdkwrite', 'x', { user: 'user' }), denied)
  await assert.rejects(sbx.files.write('/root/owned', 'x', { user: 'user' }), denied)
  await sbx.commands.run('echo s3cr3t > /root/secret && chmod 600 /root/secret', { user: 'root' })
  await assert.rejects(sbx.files.read('/root/secret', { user: 'user' }), denied)
  assert.equal(await sbx.files.read('/root/secret', { user: 'root' }), 's3cr3t\n')
  assert.equal((await sbx.commands.run('id -un', { user: 'user' })).stdout.trim(), 'user')
  // Several files in one write are one multipart upload: all or nothing.
  await assert.rejects(sbx.files.write([
    { path: '/home/user/mp-ok.txt', data: 'ok' },
    { path: '/etc/mp-evil.txt', data: 'x' },
  ], { user: 'user' }), denied)
  assert.equal(await sbx.files.exists('/home/user/mp-ok.txt'), false)
  const staged = await sbx.commands.run('ls -A /home/user /etc | grep -c zygo-upload || true')
  assert.equal(staged.stdout.trim(), '0')
})

test('runCode: state kept between calls; an error result', async () => {
  await sbx.runCode('x = 41')
  const r = await sbx.runCode('x + 1')
  assert.equal(r.text, '42')
  const bad = await sbx.runCode('1/0')
  assert.equal(bad.error?.name, 'ZeroDivisionError')
})

test('fork count 3: the parent\'s files and state, each its own identity', async () => {
  await sbx.files.write('/home/user/forked.txt', 'before fork')
  const parent = await identity(sbx)
  const kids = await sbx.fork({ count: 3, timeoutMs: 600_000 })
  assert.equal(kids.length, 3)
  const ids = []
  for (const k of kids) {
    assert.ok(!(k instanceof Error), `a fork failed: ${k?.message}`)
    track(k)
    assert.notEqual(k.sandboxId, sbx.sandboxId)
    assert.equal(await k.files.read('/home/user/forked.txt'), 'before fork')
    assert.equal((await k.runCode('x')).text, '41')
    const rnd = (await k.runCode('import random; random.getrandbits(64)')).text
    ids.push({ ...(await identity(k)), rnd })
  }
  for (const field of ['generation', 'hostname', 'machineId', 'draw', 'rnd']) {
    const vals = ids.map((i) => i[field])
    assert.equal(new Set(vals).size, 3, `${field} differs in the 3 forks: ${vals}`)
    if (field !== 'rnd') assert.ok(!vals.includes(parent[field]), `${field} differs from the parent's`)
  }
  // Without timeoutMs a child lives as long as its parent has left (E2B finding M3), not 15 s.
  const [kid] = await sbx.fork({ count: 1 })
  assert.ok(!(kid instanceof Error), `a fork failed: ${kid?.message}`)
  track(kid)
  const parentEnd = (await Base.getInfo(sbx.sandboxId)).endAt.getTime()
  const kidEnd = (await Base.getInfo(kid.sandboxId)).endAt.getTime()
  assert.ok(Math.abs(kidEnd - parentEnd) < 30_000, `the child ends at ${new Date(kidEnd).toISOString()}, the parent at ${new Date(parentEnd).toISOString()}`)
  await kid.kill()
})

test('pause and resume: the same id, files and state kept, a new generation', async () => {
  const before = await identity(sbx)
  assert.equal(await sbx.pause(), true)
  assert.equal((await Base.getInfo(sbx.sandboxId)).state, 'paused')
  assert.equal(await Base.pause(sbx.sandboxId), false, 'pausing a paused sandbox answers false')
  const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 600_000 })
  assert.equal(again.sandboxId, sbx.sandboxId)
  assert.equal((await Base.getInfo(sbx.sandboxId)).state, 'running')
  assert.equal(await again.files.read('/home/user/forked.txt'), 'before fork')
  assert.equal((await again.runCode('x')).text, '41')
  const after = await identity(again)
  assert.notEqual(after.generation, before.generation)
})

test('setTimeout and expiry: killed, or paused, as asked', async () => {
  const short = track(await Base.create({ timeoutMs: 2000 }))
  const kept = track(await Base.create({ timeoutMs: 2000 }))
  await kept.setTimeout(600_000)
  const paused = track(await Base.create({ timeoutMs: 2000, lifecycle: { onTimeout: 'pause' } }))
  const gone = async (id) => Base.getInfo(id).then(() => false, (e) => e instanceof SandboxNotFoundError)
  const stateOf = async (id) => (await Base.getInfo(id)).state
  for (let i = 0; i < 100 && !((await gone(short.sandboxId)) && (await stateOf(paused.sandboxId)) === 'paused'); i++) {
    await sleep(200)
  }
  assert.ok(await gone(short.sandboxId), 'the sandbox past its timeout is gone')
  assert.equal(await stateOf(paused.sandboxId), 'paused')
  assert.equal(await stateOf(kept.sandboxId), 'running')
  // Concurrent connects of a paused sandbox (raw, as other SDKs send them): the later ones
  // wait for the first one's resume and succeed, as E2B's connect does, rather than a 409.
  const connect = () => fetch(`${process.env.E2B_API_URL}/sandboxes/${paused.sandboxId}/connect`, {
    method: 'POST',
    headers: { 'X-API-Key': process.env.E2B_API_KEY, 'Content-Type': 'application/json' },
    body: '{"timeout":60}',
  })
  const answers = await Promise.all([connect(), connect(), connect()])
  const statuses = answers.map((r) => r.status)
  assert.ok(statuses.every((st) => st === 200 || st === 201) && statuses.includes(201), `concurrent connects answered ${statuses}`)
  for (const r of answers) assert.equal((await r.json()).sandboxID, paused.sandboxId)
  assert.equal(await stateOf(paused.sandboxId), 'running')
})

test('kill, and the SDK\'s own errors for what does not exist', async () => {
  const k = track(await Base.create())
  assert.equal(await k.kill(), true)
  assert.equal(await Base.kill(k.sandboxId), false)
  await assert.rejects(Base.getInfo(k.sandboxId), (e) => e instanceof SandboxNotFoundError)
  await assert.rejects(Base.connect('sb-0000000000000000'), (e) => e instanceof SandboxNotFoundError)
  await assert.rejects(Base.create('no-such-template'), (e) => !(e instanceof AuthenticationError) && /404/.test(e.message))
  await assert.rejects(Base.list({ apiKey: 'e2b_' + '0'.repeat(64) }).nextItems(), (e) => e instanceof AuthenticationError)
})
