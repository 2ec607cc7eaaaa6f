import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Singleflight } from '../../../src/host/read-path/singleflight.js';

test('Singleflight: concurrent callers share one call, the key is released when it settles', async () => {
  const sf = new Singleflight<string, number>();
  let calls = 0;
  let joined = 0;
  sf.on('join', () => joined++);
  let release!: (v: number) => void;
  const fn = () => {
    calls++;
    return new Promise<number>((r) => (release = r));
  };
  const ps = Array.from({ length: 10 }, () => sf.do('k', fn));
  assert.equal(sf.inFlight, 1);
  assert.equal(calls, 1);
  release(42);
  assert.deepEqual(await Promise.all(ps), Array(10).fill(42));
  assert.equal(sf.joins, 9);
  assert.equal(joined, 9);
  assert.equal(sf.inFlight, 0);
  assert.equal(await sf.do('k', async () => (calls++, 7)), 7); // a new call after release
  assert.equal(calls, 2);
  // errors (also synchronous throws) are shared and release the key too
  const boom = () => {
    throw new Error('boom');
  };
  const errs = await Promise.allSettled([sf.do('e', boom), sf.do('e', boom)]);
  assert.ok(errs.every((r) => r.status === 'rejected'));
  assert.equal(sf.inFlight, 0);
});
