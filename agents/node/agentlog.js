'use strict';
// Diagnostics of the agent itself: one fs.writeSync to fd 2 per line, prefixed "zygo-agent: ".
//
// fd 2 is the worker's own stderr, which the supervisor reads and logs without a request id,
// until `go`; from then on fd 2 is the request's dir/stderr (request.js redirectStdio), so
// what the agent says about the request it serves is in that request's logs.

const fs = require('fs');

/** Write one line to fd 2. Returns nothing; never throws (errors are dropped). */
function log(message) {
  const line = 'zygo-agent: ' + String(message).replace(/\n/g, ' | ') + '\n';
  try {
    fs.writeSync(2, line);
  } catch {
    // nothing to do: fd 2 is gone or full
  }
}

module.exports = { log };
