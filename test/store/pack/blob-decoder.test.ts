import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { sha256 } from '../../../src/core/digest.js';
import { BlobDecoder } from '../../../src/store/pack/blob-decoder.js';
import { PackWriter } from '../../../src/store/pack/pack.js';
import type { BlobLocation } from '../../../src/store/pack/pack-types.js';

function code(err: unknown): string | undefined {
  return (err as { code?: string }).code;
}

/** A pack of three chunks (stored, lz4, stored) and their locations. */
function pack(): { bytes: Buffer; locs: BlobLocation[]; raws: Buffer[] } {
  const raws = [randomBytes(5000), Buffer.from('compressible text '.repeat(500)), randomBytes(300)];
  const w = new PackWriter(1 << 16);
  for (const r of raws) w.add('chunk', sha256(r), r);
  const p = w.finish();
  return { bytes: p.bytes, raws, locs: p.entries.map((e) => ({ ...e, pack: p.key })) };
}

test('BlobDecoder.fromSpan: verified bytes at once (no Promise); a stored blob is copied out of a larger span', () => {
  const { bytes, locs, raws } = pack();
  const d = new BlobDecoder(() => assert.fail('no read on the happy path'));
  assert.equal(locs[1].codec, 'lz4');
  for (let i = 0; i < locs.length; i++) {
    const b = d.fromSpan(bytes, 0, locs[i]);
    assert.ok(Buffer.isBuffer(b), 'a Buffer, not a Promise');
    assert.ok(b.equals(raws[i]));
    if (locs[i].codec === 'none') assert.notEqual(b.buffer, bytes.buffer, 'copied: it does not pin the span');
  }
  // a span that starts later than the pack
  const span = bytes.subarray(locs[1].offset);
  assert.ok((d.fromSpan(span, locs[1].offset, locs[2]) as Buffer).equals(raws[2]));
});

test('BlobDecoder: a bad blob is read once more on its own (refetch); bad twice is E_INTEGRITY with digest, pack and offset', async () => {
  const { bytes, locs, raws } = pack();
  const bad = Buffer.from(bytes);
  bad[locs[0].offset + 10] ^= 1;
  const reads: [number, number, boolean][] = [];
  const events: string[] = [];
  let store = bytes;
  const d = new BlobDecoder(
    async (_pack, offset, length, refetch) => {
      reads.push([offset, length, refetch]);
      return store.subarray(offset, offset + length);
    },
    { refetch: () => events.push('refetch'), integrityError: () => events.push('integrity-error') },
  );
  // the span is bad, the store good: a Promise of the right bytes after one refetch
  const p = d.fromSpan(bad, 0, locs[0]);
  assert.ok(p instanceof Promise);
  assert.ok((await p).equals(raws[0]));
  assert.deepEqual(reads, [[locs[0].offset, locs[0].storedLength, true]]);
  assert.deepEqual(events, ['refetch']);
  // a short span is bad bytes too
  assert.ok((await d.fromSpan(bytes.subarray(0, locs[0].offset + 5), 0, locs[0])).equals(raws[0]));
  // bad in the store too: E_INTEGRITY, reported once
  store = bad;
  events.length = 0;
  await assert.rejects(d.read(locs[0]), (e) => {
    assert.equal(code(e), 'E_INTEGRITY');
    assert.deepEqual((e as { details?: unknown }).details, { digest: locs[0].digest, pack: locs[0].pack, offset: locs[0].offset });
    return true;
  });
  assert.deepEqual(events, ['refetch', 'integrity-error']);
  // checkSize
  assert.equal(BlobDecoder.checkSize(raws[2], { digest: locs[2].digest, size: raws[2].length }), raws[2]);
  assert.throws(
    () => BlobDecoder.checkSize(raws[2], { digest: locs[2].digest, size: 1 }),
    (e) => code(e) === 'E_INTEGRITY',
  );
});
