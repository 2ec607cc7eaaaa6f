/**
 * The hot content arena (src/host/fuse/content-arena.ts): whole objects in a shared ring,
 * read by range, invalidated when the ring overwrites them, and never returned when an
 * overwrite raced the copy. Pure in-memory (the FUSE workers reading it are in
 * fuse-content.test.ts).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { describe, it } from 'node:test';
import { ContentArena, UNIT, readFromArena, type ArenaView } from '../../../src/host/fuse/content-arena.js';

function arena(bytes: number): { a: ContentArena; view: () => ArenaView; reserve: () => number } {
  const ctrl = new Int32Array(new SharedArrayBuffer(4));
  const a = new ContentArena(bytes, (u) => void Atomics.exchange(ctrl, 0, u));
  return {
    a,
    view: () => ({ bytes: new Uint8Array(a.buffer), units: a.units, nodes: new Int32Array(a.nodeBuffer) }),
    reserve: () => Atomics.add(ctrl, 0, 0),
  };
}

function read(view: ArenaView, k: number, offset: number, length: number, reserve: () => number): Buffer | undefined {
  const out = Buffer.alloc(length + 8);
  const n = readFromArena(view, k, offset, length, out, 8, reserve);
  return n < 0 ? undefined : out.subarray(8, 8 + n);
}

describe('content arena', () => {
  it('serves whole objects and ranges of them, clamps at the end, refuses what it cannot hold', () => {
    const { a, view, reserve } = arena(1 << 20);
    assert.equal(a.units * UNIT, 1 << 20);
    const objs = [randomBytes(1), randomBytes(100), randomBytes(64 * 1024), randomBytes(200_000)];
    objs.forEach((_, k) => a.ensureNode(k));
    objs.forEach((b, k) => assert.ok(a.put(k, b), `put ${k}`));
    const v = view();
    objs.forEach((b, k) => {
      assert.ok(read(v, k, 0, b.length, reserve)!.equals(b), `whole ${k}`);
      assert.ok(read(v, k, 0, 1 << 20, reserve)!.equals(b), `clamped ${k}`);
    });
    assert.ok(read(v, 3, 1000, 5000, reserve)!.equals(objs[3]!.subarray(1000, 6000)));
    assert.equal(read(v, 3, 200_000, 10, reserve)!.length, 0, 'at the end: 0 bytes');
    assert.equal(read(v, 3, 300_000, 10, reserve)!.length, 0, 'past the end: 0 bytes');
    assert.equal(read(v, 9, 0, 10, reserve), undefined, 'a node never put');
    assert.equal(a.put(0, randomBytes(1)), false, 'already there');
    assert.equal(a.put(1, Buffer.alloc(0)), false, 'empty');
    a.ensureNode(5);
    assert.equal(a.put(5, randomBytes(a.maxObjectBytes + 1)), false, 'over a quarter of the arena');
  });

  it('invalidates the objects the ring overwrites; the newest stay readable; the node array grows', () => {
    const { a, view, reserve } = arena(64 * 1024); // 1024 units
    const objs = Array.from({ length: 40 }, (_, i) => randomBytes(5000 + i * 37));
    let moved = 0;
    objs.forEach((b, k) => {
      if (a.ensureNode(k * 100)) moved++; // sparse node indexes: 0, 100, …, 3900
      assert.ok(a.put(k * 100, b));
    });
    assert.ok(moved >= 2, 'the node array moved to bigger buffers');
    const v = view();
    let live = 0;
    objs.forEach((b, k) => {
      const got = read(v, k * 100, 0, b.length, reserve);
      assert.equal(a.has(k * 100), got !== undefined);
      if (got) {
        live++;
        assert.ok(got.equals(b), `object ${k} intact`);
      }
    });
    assert.ok(live >= 5 && live <= 13, `${live} of 40 objects of ~6 KB fit in 64 KiB`);
    assert.ok(a.has(3900) && !a.has(0), 'the newest survive, the oldest are gone');
    // a slot freed by an overwrite takes its object again
    assert.ok(a.put(0, objs[0]!));
    assert.ok(read(view(), 0, 0, objs[0]!.length, reserve)!.equals(objs[0]!));
  });

  it('a reader whose copy raced an overwrite gets nothing, not torn bytes', () => {
    const { a, view, reserve } = arena(64 * 1024);
    a.ensureNode(1);
    const b = randomBytes(10_000);
    a.put(1, b);
    const v = view();
    // the writer goes round the ring while the reader copies: the reserve it loads afterwards is a ring ahead
    const racing = () => reserve() + a.units + 1;
    assert.equal(readFromArena(v, 1, 0, b.length, Buffer.alloc(b.length), 0, racing), -1);
    assert.ok(read(v, 1, 0, b.length, reserve)!.equals(b), 'without the race it is served');
  });
});
