'use strict';
// Case BH-07 (../shared/cases/fork-safety-cases.md) adapted to workers: generators drawn from
// at import, then in the request, in 11 workers. Each worker is a fresh process, so Math.random
// in the main context and in a new vm context, crypto.randomBytes and crypto.randomUUID must
// all differ across the 11.

const assert = require('node:assert');
const { test } = require('node:test');
const { invoke } = require('../testdata/harness');

const WORKERS = 11;

test('BH-07: 11 workers give 11 distinct m, c, v (and randomUUID) values', async () => {
  const runs = await Promise.all(Array.from({ length: WORKERS },
    () => invoke('bh07', 'main.js:handler')));
  const values = runs.map((run) => {
    assert.deepStrictEqual(run.exit, { code: 0, signal: null }, run.worker.err);
    assert.strictEqual(run.result.ok, true, JSON.stringify(run.result));
    return run.result.value;
  });
  assert.strictEqual(new Set(runs.map((r) => r.ready.pid)).size, WORKERS, 'one process each');
  for (const key of ['m', 'c', 'u', 'v']) {
    const seen = new Set(values.map((v) => v[key]));
    assert.strictEqual(seen.size, WORKERS, `${key}: ${JSON.stringify(values.map((v) => v[key]))}`);
  }
  for (const v of values) {
    assert.ok(v.m >= 0 && v.m < 1 && v.v >= 0 && v.v < 1);
    assert.match(v.c, /^[0-9a-f]{16}$/);
  }
});
