const fs = require('fs');
const os = require('os');
const cp = require('child_process');

function ls(dir) { try { return fs.readdirSync(dir).sort(); } catch (e) { return null; } }
const AT_IMPORT = { secrets: ls('/run/secrets'), cgroup: fs.readFileSync('/proc/self/cgroup', 'utf8') };

exports.handler = async (event, context) => {
  switch (event.action) {
    case 'import': return AT_IMPORT;
    case 'now': return { secrets: ls('/run/secrets'), cgroup: fs.readFileSync('/proc/self/cgroup', 'utf8'),
                         key: fs.readFileSync('/run/secrets/NODE_KEY', 'utf8') };
    case 'tmp': fs.writeFileSync(os.tmpdir() + '/mine', context.requestId); return os.tmpdir();
    case 'say': console.log('hello from', context.requestId); console.error('warn from', context.requestId); return 'said';
    case 'throw': throw new RangeError('out of range: ' + event.why);
    // A worker is PID 1 of its sandbox, so a signal it sends itself is dropped;
    // abort() ends in a fault (SIGSEGV for PID 1), as a native crash would.
    case 'crash': process.abort(); return 'unreachable';
    case 'sleep': await new Promise(r => setTimeout(r, 30000)); return 'woke';
    case 'spin': for (;;) {}
    case 'memory': { const a = []; for (;;) a.push(Buffer.alloc(16 << 20, 1)); }
    case 'forkbomb': { const kids = []; for (let i = 0; i < 64; i++) { try { kids.push(cp.spawn('/bin/sleep', ['30'])); } catch (e) {} } await new Promise(r => setTimeout(r, 3000)); return kids.length; }
    default: return 'ok';
  }
};
