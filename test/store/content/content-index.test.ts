/**
 * The binary content index of shared layer images (src/store/content/content-index.ts): what
 * is encoded reads back object by object, short names find exactly the objects whose first 138
 * bits they hold, and a malformed or foreign index is refused with E_FORMAT.
 */
import { strict as assert } from 'node:assert';
import { randomBytes } from 'node:crypto';
import { describe, it } from 'node:test';
import { ContentIndex, contentsLookup, type LayerContents } from '../../../src/store/content/content-index.js';
import { shortContentName } from '../../../src/core/content-name.js';
import { sha256, type Digest } from '../../../src/core/digest.js';

const hex = (): string => randomBytes(32).toString('hex');
const root = sha256('root');

/** Random contents: dense files of 0–4 chunks, sparse files with extents, sizes up to 2^40. */
function randomContents(n: number): LayerContents {
  const out: LayerContents = {};
  for (let i = 0; i < n; i++) {
    const chunks = Array.from(
      { length: i % 5 },
      () => [`sha256:${hex()}` as Digest, 1 + Math.floor(Math.random() * 2 ** 22)] as [Digest, number],
    );
    const size = i === 7 ? 2 ** 40 + 3 : chunks.reduce((a, [, s]) => a + s, 0);
    out[hex()] =
      i % 4 === 3
        ? [
            size + 4096,
            chunks,
            [
              [0, 100],
              [8192, Math.max(0, size - 100)],
            ],
          ]
        : [size, chunks];
  }
  return out;
}

/** `h` with the bit at `bit` (0 = the top bit of byte 0) flipped. */
function flipBit(h: string, bit: number): string {
  const b = Buffer.from(h, 'hex');
  b[bit >> 3]! ^= 0x80 >> (bit & 7);
  return b.toString('hex');
}

describe('content index', () => {
  it('reads back every object it was given, and nothing else', () => {
    const contents = randomContents(500);
    const hardlinks = { 'a/b': ['c', 'd/e'] };
    const ix = ContentIndex.parse(ContentIndex.encode({ root, files: 600, dirs: 40, contents, hardlinks }), root);
    assert.equal(ix.count, 500);
    assert.deepEqual([ix.root, ix.files, ix.dirs, ix.hardlinks], [root, 600, 40, hardlinks]);
    for (const [h, c] of Object.entries(contents)) assert.deepEqual(ix.get(h), c, h);
    for (let i = 0; i < 200; i++) assert.equal(ix.get(hex()), undefined);
    assert.equal(ix.get('not hex'), undefined);
    const sizes = [...ix.sizes()];
    assert.deepEqual(
      sizes.map(([h]) => h),
      Object.keys(contents).sort(),
      'in digest order',
    );
    for (const [h, size, sparse] of sizes) assert.deepEqual([size, sparse], [contents[h]![0], contents[h]![2] !== undefined]);
    const empty = ContentIndex.parse(ContentIndex.encode({ root, files: 0, dirs: 1, contents: {}, hardlinks: {} }), root);
    assert.equal(empty.get(hex()), undefined);
    assert.deepEqual(empty.withShortName(shortContentName(hex())), []);
  });

  it('finds an object by its short name (138 bits): the bits after them do not matter, the ones in them do', () => {
    const base = hex();
    const sameShort = [flipBit(base, 138), flipBit(base, 200), flipBit(base, 255)];
    const otherShort = [flipBit(base, 137), flipBit(base, 0), flipBit(base, 136)];
    for (const h of sameShort) assert.equal(shortContentName(h), shortContentName(base));
    for (const h of otherShort) assert.notEqual(shortContentName(h), shortContentName(base));
    const contents = randomContents(300);
    const lone = Object.keys(contents);
    contents[base] = [1, []];
    for (const h of otherShort) contents[h] = [2, []];
    const ix = ContentIndex.parse(ContentIndex.encode({ root, files: 1, dirs: 0, contents, hardlinks: {} }), root);
    assert.deepEqual(ix.withShortName(shortContentName(base)), [base]);
    for (const h of [...lone, ...otherShort]) assert.deepEqual(ix.withShortName(shortContentName(h)), [h], h);
    assert.deepEqual(ix.withShortName(shortContentName(hex())), []);
    assert.deepEqual(ix.withShortName('not a short name'), []);
    // two objects that share the name: both are found (the caller refuses the name)
    const twins = { ...contents, [sameShort[0]!]: [3, []] as [number, []] };
    const ix2 = ContentIndex.parse(ContentIndex.encode({ root, files: 1, dirs: 0, contents: twins, hardlinks: {} }), root);
    assert.deepEqual(ix2.withShortName(shortContentName(base)).sort(), [base, sameShort[0]!].sort());
    // a built layer's contents answer the same
    const rec = contentsLookup(twins);
    assert.deepEqual(rec.withShortName(shortContentName(base)).sort(), [base, sameShort[0]!].sort());
    assert.deepEqual(rec.get(base), [1, []]);
    assert.equal(rec.get('__proto__'), undefined);
  });

  it('refuses an index that is not one, or not of this root, or cut short (E_FORMAT)', () => {
    const good = ContentIndex.encode({ root, files: 1, dirs: 0, contents: randomContents(10), hardlinks: { x: ['y'] } });
    const bad: [string, Buffer][] = [
      ['JSON', Buffer.from(JSON.stringify({ v: 1, root, contents: {}, hardlinks: {} }))],
      ['empty', Buffer.alloc(0)],
      ['cut short', good.subarray(0, good.length - 1)],
      ['one byte more', Buffer.concat([good, Buffer.from(' ')])],
      ['its hardlinks not JSON', Buffer.concat([good.subarray(0, good.length - 2), Buffer.from('!!')])],
    ];
    for (const [what, b] of bad) assert.throws(() => ContentIndex.parse(b, root), { code: 'E_FORMAT' }, what);
    assert.throws(() => ContentIndex.parse(good, sha256('another root')), { code: 'E_FORMAT' });
    // an entry whose chunk run points past the chunk table is refused when read
    const one = ContentIndex.encode({ root, files: 1, dirs: 0, contents: { [hex()]: [5, [[sha256('c'), 5]]] }, hardlinks: {} });
    one.writeUInt32LE(7, 64 + 40); // first chunk: 7 of 1
    const ix = ContentIndex.parse(one, root);
    const [[h]] = [...ix.sizes()];
    assert.throws(() => ix.get(h!), { code: 'E_FORMAT' });
    assert.throws(() => ContentIndex.encode({ root, files: 1, dirs: 0, contents: { nothex: [1, []] }, hardlinks: {} }), {
      code: 'E_USAGE',
    });
  });
});
