import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Digest } from '../../../src/core/digest.js';
import type { BlobIndex, BlobLocation } from '../../../src/store/pack/pack-types.js';
import { LOOKUP_BATCH, MERGE_GAP_BYTES, MERGE_MAX_BYTES, RangePlanner } from '../../../src/store/pack/range-plan.js';

let n = 0;
function at(pack: string, offset: number, storedLength: number): { loc: BlobLocation } {
  const digest = `sha256:${(n++).toString(16).padStart(64, '0')}` as Digest;
  return { loc: { pack, offset, storedLength, rawLength: storedLength, digest, kind: 'chunk', codec: 'none' } };
}

test('RangePlanner: neighbours within the gap share a read; a wider gap, a longer span, another pack or an earlier offset start a new one', () => {
  const p = new RangePlanner({ maxMergeBytes: 1000, maxGapBytes: 100 });
  const a = at('p1', 0, 100);
  const b = at('p1', 200, 100); // gap 100: merged
  const c = at('p2', 0, 1); // another pack
  const d = at('p1', 500, 100);
  const e = at('p1', 601, 100); // gap 1 after d: merged (d started a new read: it follows another pack's blob)
  const ranges = p.plan([a, b, c, d, e]);
  assert.deepEqual(
    ranges.map((r) => [r.pack, r.start, r.end, r.items.length]),
    [
      ['p1', 0, 300, 2],
      ['p2', 0, 1, 1],
      ['p1', 500, 701, 2],
    ],
  );
  // gap of maxGap + 1 splits
  assert.equal(p.plan([at('p', 0, 10), at('p', 111, 10)]).length, 2);
  assert.equal(p.plan([at('p', 0, 10), at('p', 110, 10)]).length, 1);
  // the span limit: 0..1000 fits, 0..1001 does not; a single larger blob is read whole
  assert.equal(p.plan([at('p', 0, 500), at('p', 500, 500)]).length, 1);
  assert.equal(p.plan([at('p', 0, 500), at('p', 500, 501)]).length, 2);
  assert.deepEqual(
    p.plan([at('p', 0, 5000)]).map((r) => [r.start, r.end]),
    [[0, 5000]],
  );
  // an offset before the read's start (unsorted input) starts a new read
  assert.equal(p.plan([at('p', 500, 10), at('p', 400, 10)]).length, 2);
  // the defaults are the named constants
  assert.deepEqual(new RangePlanner().limits, { maxMergeBytes: MERGE_MAX_BYTES, maxGapBytes: MERGE_GAP_BYTES });
});

test('RangePlanner.locate: batched lookups of at most LOOKUP_BATCH digests, unknown digests absent', async () => {
  const known = new Map<Digest, BlobLocation>();
  const digests: Digest[] = [];
  for (let i = 0; i < 2 * LOOKUP_BATCH + 5; i++) {
    const x = at('p', i * 10, 10);
    digests.push(x.loc.digest);
    if (i % 2 === 0) known.set(x.loc.digest, x.loc);
  }
  const sizes: number[] = [];
  const index: BlobIndex = {
    async lookup(ds) {
      sizes.push(ds.length);
      const out = new Map<Digest, BlobLocation>();
      for (const d of ds) if (known.has(d)) out.set(d, known.get(d)!);
      return out;
    },
  };
  const out = new Map<Digest, BlobLocation>();
  await RangePlanner.locate(index, digests, out);
  assert.deepEqual(sizes, [LOOKUP_BATCH, LOOKUP_BATCH, 5]);
  assert.equal(out.size, known.size);
  for (const [d, loc] of known) assert.equal(out.get(d), loc);
});
