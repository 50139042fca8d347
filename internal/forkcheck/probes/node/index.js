// zygo check functions: the Node probe. Import-time code makes every
// generator live; each request reports what it draws and what it can see.
const crypto = require('crypto');
const fs = require('fs');
const os = require('os');
const vm = require('vm');

Math.random();
crypto.randomUUID();
crypto.randomBytes(16);
const GLOBAL = { touchedBy: null };
const STARTED = process.hrtime.bigint().toString(); // when this worker imported the handler

function sockets() {
  let n = 0;
  for (const fd of fs.readdirSync('/proc/self/fd')) {
    try { if (fs.readlinkSync(`/proc/self/fd/${fd}`).startsWith('socket:')) n++; } catch (e) { /* gone */ }
  }
  return n;
}

function secretsSeen() {
  try { return fs.readdirSync('/run/secrets').sort(); } catch (e) { return []; }
}

exports.handler = async (event, context) => {
  const earlier = GLOBAL.touchedBy;
  GLOBAL.touchedBy = context.requestId;
  return {
    'Math.random()': Math.random(),
    'crypto.randomUUID()': crypto.randomUUID(),
    'crypto.randomUUID({disableEntropyCache: true})': crypto.randomUUID({ disableEntropyCache: true }),
    'crypto.randomBytes(16)': crypto.randomBytes(16).toString('hex'),
    'vm new context Math.random()': vm.runInNewContext('Math.random()'),
    'TMPDIR': os.tmpdir(),
    'pid': process.pid,
    'import time (monotonic ns)': STARTED,
    'global set by an earlier request': earlier,
    'sockets in the fd table': sockets(),
    "another function's secret": secretsSeen(),
    'hostname': os.hostname(),
  };
};
