import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Semaphore } from '../../src/core/semaphore.js';

test('Semaphore: free slots cost no Promise; waiters get slots first come first served', async () => {
  const s = new Semaphore(2);
  assert.equal(s.acquire(), undefined);
  assert.equal(s.acquire(), undefined);
  const order: number[] = [];
  const w1 = s.acquire();
  const w2 = s.acquire();
  assert.ok(w1 instanceof Promise && w2 instanceof Promise);
  void w2.then(() => order.push(2));
  void w1.then(() => order.push(1));
  s.release();
  await w1;
  assert.deepEqual(order, [1]);
  s.release();
  await w2;
  assert.deepEqual(order, [1, 2]);
  // both waiters hold their slots now: the next acquire waits until one is released
  const w3 = s.acquire();
  assert.ok(w3 instanceof Promise);
  s.release();
  await w3;
  s.release();
  s.release();
  assert.equal(s.acquire(), undefined, 'all slots back');
});
