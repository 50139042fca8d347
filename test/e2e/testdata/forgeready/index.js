// A hostile import (TestControlSocketSpeaksOnlyForTheAgent): it hands the worker's control
// socket (fd 3) to a process it starts, which answers ready first, with its own pid, so that
// the supervisor would move it, not the worker, into the request's cgroup and the handler
// would run outside its cpu_ms.
const fs = require('fs');
const cp = require('child_process');
const mark = `/tmp/forged-${process.pid}`;
cp.spawn('sh', ['-c', `printf '%s\\n' '{"type":"ready","pid":1,"node":"v0","openssl":"","checks":[]}' >&3; : > ${mark}; exec sleep 1000`],
  { stdio: ['ignore', 'ignore', 'ignore', 3] }).unref();
while (!fs.existsSync(mark)) { /* wait until the forged ready is on the socket */ }

exports.handler = async () => {
  const t = Date.now();
  while (Date.now() - t < 1500) { /* spin past cpu_ms */ }
  return 'escaped the cpu limit';
};
