/**
 * The shared content table of the content FUSE server (src/host/fuse/content-table.ts):
 * lookups by long and short names, growth, ambiguity of short names (the names themselves:
 * content-name.test.ts). Pure in-memory: no FUSE here (the
 * worker-side answers against the kernel are in fuse-content.test.ts).
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { describe, it } from 'node:test';
import { AMBIGUOUS, ContentTable, lookupSlot, slotHex, slotNode, slotSize } from '../../../src/host/fuse/content-table.js';
import {
  SHORT_NAME_LENGTH,
  contentKey,
  isShortContentName,
  shortContentName,
  shortContentRedirect,
} from '../../../src/core/content-name.js';

const hexOf = (s: string) => createHash('sha256').update(s).digest('hex');

describe('content table', () => {
  it('finds every digest by its hex and by its short name, across growth, with node id and size', () => {
    const t = new ContentTable(64);
    const n = 5000; // several doublings from 64 slots
    let grew = 0;
    for (let i = 0; i < n; i++) if (t.insert(hexOf(`c${i}`), 1000 + i, i * 4096 + 7)) grew++;
    assert.equal(t.size, n);
    assert.ok(grew >= 6, `grew ${grew} times`);
    assert.equal(t.generation, grew);
    for (let i = 0; i < n; i += 7) {
      const hex = hexOf(`c${i}`);
      const byHex = lookupSlot(t.words, contentKey(hex)!);
      const byShort = lookupSlot(t.words, contentKey(shortContentName(hex))!);
      assert.ok(byHex >= 0, `c${i} by hex`);
      assert.equal(byShort, byHex, `c${i} by short name`);
      assert.equal(slotNode(t.words, byHex), 1000 + i);
      assert.equal(slotSize(t.words, byHex), i * 4096 + 7);
      assert.equal(slotHex(t.words, byHex), hex);
    }
    // sizes past 4 GiB survive the two-word encoding
    const bigHex = hexOf('big');
    t.insert(bigHex, 7, 5 * 2 ** 32 + 12345);
    assert.equal(slotSize(t.words, lookupSlot(t.words, contentKey(bigHex)!)), 5 * 2 ** 32 + 12345);
    assert.equal(lookupSlot(t.words, contentKey(hexOf('absent'))!), -1);
    assert.equal(lookupSlot(t.words, contentKey(shortContentName(hexOf('absent')))!), -1);
  });

  it('reserve sizes the table once for what is coming', () => {
    const t = new ContentTable(64);
    t.insert(hexOf('first'), 1, 1);
    assert.equal(t.reserve(5000), true);
    const gen = t.generation;
    for (let i = 0; i < 4999; i++) assert.equal(t.insert(hexOf(`r${i}`), 2 + i, 1), false, `no growth at ${i}`);
    assert.equal(t.generation, gen);
    assert.equal(t.reserve(100), false, 'already big enough');
    assert.equal(slotNode(t.words, lookupSlot(t.words, contentKey(hexOf('first'))!)), 1, 'kept across the move');
  });

  it('a reader holding the buffer from before a growth still finds what it held', () => {
    const t = new ContentTable(64);
    const early = hexOf('early');
    t.insert(early, 5, 10);
    const old = t.words;
    for (let i = 0; i < 200; i++) t.insert(hexOf(`x${i}`), 100 + i, 1);
    assert.notEqual(t.words, old, 'the table moved');
    assert.equal(slotNode(old, lookupSlot(old, contentKey(early)!)), 5);
    assert.equal(lookupSlot(old, contentKey(hexOf('x150'))!), -1, 'the old buffer does not see later inserts');
  });

  it('short names: 23 base64url characters, 24-byte redirects, and a shared short name is ambiguous, never guessed', () => {
    const hex = hexOf('a');
    const short = shortContentName(hex);
    assert.equal(short.length, SHORT_NAME_LENGTH);
    assert.ok(isShortContentName(short));
    assert.equal(Buffer.from(short, 'base64url').subarray(0, 17).toString('hex'), hex.slice(0, 34));
    assert.equal(shortContentRedirect(hex), `/${short}`);
    assert.equal(Buffer.byteLength(shortContentRedirect(hex)), 24);

    // two digests equal in their first 138 bits (17 bytes + the top 2 bits of byte 17), different after
    const prefix = hex.slice(0, 34);
    const a = `${prefix}${'00'}${'11'.repeat(14)}`;
    const b = `${prefix}${'3f'}${'22'.repeat(14)}`;
    const c = `${prefix}${'40'}${'33'.repeat(14)}`; // byte 17 differs in its top 2 bits: another short name
    assert.equal(shortContentName(a), shortContentName(b));
    assert.notEqual(shortContentName(a), shortContentName(c));
    const t = new ContentTable();
    t.insert(a, 1, 1);
    assert.equal(slotNode(t.words, lookupSlot(t.words, contentKey(shortContentName(a))!)), 1);
    t.insert(c, 3, 3);
    assert.equal(slotNode(t.words, lookupSlot(t.words, contentKey(shortContentName(c))!)), 3, 'the 2 tail bits tell c apart');
    t.insert(b, 2, 2);
    assert.equal(lookupSlot(t.words, contentKey(shortContentName(a))!), AMBIGUOUS);
    // the full names still resolve exactly
    assert.equal(slotNode(t.words, lookupSlot(t.words, contentKey(a)!)), 1);
    assert.equal(slotNode(t.words, lookupSlot(t.words, contentKey(b)!)), 2);
  });
});
