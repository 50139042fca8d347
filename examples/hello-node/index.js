// A Node function: each request is served by a fresh worker process that
// loaded this file ahead of time, so its random state is its own.
const crypto = require('crypto');
const os = require('os');

exports.handler = async (event, context) => ({
  greeting: `hello, ${event.name || 'world'}`,
  requestId: context.requestId,
  random: Math.random(),
  uuid: crypto.randomUUID(),
  tmpdir: os.tmpdir(),
});
