import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { sha256 } from '../../../src/core/digest.js';
import {
  decodeBlob,
  PACK_ENTRY_SIZE,
  PACK_FOOTER_SIZE,
  PACK_MAGIC,
  packKey,
  PackWriter,
  parsePackFooter,
  parsePackIndex,
} from '../../../src/store/pack/pack.js';
import type { BlobKind } from '../../../src/store/pack/pack-types.js';

function code(err: unknown): string | undefined {
  return (err as { code?: string }).code;
}

function build(): { blobs: { kind: BlobKind; raw: Buffer }[]; pack: ReturnType<PackWriter['finish']>; size: number } {
  const blobs: { kind: BlobKind; raw: Buffer }[] = [
    { kind: 'chunk', raw: randomBytes(70_000) },
    { kind: 'chunk', raw: Buffer.from('hello world, hello world, hello world! '.repeat(2000)) },
    { kind: 'tree', raw: Buffer.from(JSON.stringify({ v: 1, entries: [] })) },
    { kind: 'chunk', raw: Buffer.from([1]) },
    { kind: 'root', raw: Buffer.from('{"v":1,"type":"root"}'.repeat(50)) },
  ];
  const w = new PackWriter(1024);
  for (const b of blobs) w.add(b.kind, sha256(b.raw), b.raw);
  const size = w.size;
  return { blobs, pack: w.finish(), size };
}

test('pack round trip: index from the footer, blobs decode, key is the sha256 of the bytes', () => {
  const { blobs, pack, size } = build();
  assert.equal(pack.bytes.length, size);
  const hex = createHash('sha256').update(pack.bytes).digest('hex');
  assert.equal(pack.key, `packs/${hex.slice(0, 2)}/${hex}`);
  assert.equal(packKey(hex), pack.key);
  const entries = parsePackIndex(pack.bytes);
  assert.deepEqual(entries, pack.entries);
  assert.equal(entries.length, blobs.length);
  entries.forEach((e, i) => {
    assert.equal(e.kind, blobs[i].kind);
    assert.equal(e.digest, sha256(blobs[i].raw));
    assert.equal(e.rawLength, blobs[i].raw.length);
    const raw = decodeBlob(pack.bytes.subarray(e.offset, e.offset + e.storedLength), e);
    assert.ok(raw.equals(blobs[i].raw));
  });
  // Random data stays uncompressed, repetitive text is lz4, tiny blobs are not compressed.
  assert.equal(entries[0].codec, 'none');
  assert.equal(entries[1].codec, 'lz4');
  assert.ok(entries[1].storedLength < entries[1].rawLength / 8);
  assert.equal(entries[3].codec, 'none');
  // Layout: blobs back to back from 0, then the index, then the footer.
  const dataEnd = entries[entries.length - 1].offset + entries[entries.length - 1].storedLength;
  assert.equal(entries[0].offset, 0);
  assert.equal(pack.bytes.length, dataEnd + entries.length * PACK_ENTRY_SIZE + PACK_FOOTER_SIZE);
  assert.ok(pack.bytes.subarray(-8).equals(PACK_MAGIC));
  const footer = parsePackFooter(pack.bytes);
  assert.equal(footer.version, 1);
  assert.equal(footer.indexLength, entries.length * PACK_ENTRY_SIZE);
});

test('the index can be parsed from the pack tail alone', () => {
  const { pack } = build();
  const tailLen = pack.entries.length * PACK_ENTRY_SIZE + PACK_FOOTER_SIZE;
  const tail = pack.bytes.subarray(pack.bytes.length - tailLen - 10);
  assert.deepEqual(parsePackIndex(tail, { packSize: pack.bytes.length }), pack.entries);
});

test('a digest added twice is stored once; an empty pack is valid', () => {
  const w = new PackWriter();
  const raw = randomBytes(1000);
  const a = w.add('chunk', sha256(raw), raw);
  const b = w.add('chunk', sha256(raw), raw);
  assert.deepEqual(a, b);
  assert.equal(w.count, 1);
  const empty = new PackWriter().finish();
  assert.equal(empty.bytes.length, PACK_FOOTER_SIZE);
  assert.deepEqual(parsePackIndex(empty.bytes), []);
  assert.throws(
    () => w.finish() && w.add('chunk', sha256(raw), raw),
    (e) => code(e) === 'E_INTERNAL',
  );
});

test('a corrupted byte in a blob is detected (E_INTEGRITY), for stored and lz4 blobs', () => {
  const { pack } = build();
  for (const i of [0, 1, 4]) {
    const e = pack.entries[i];
    for (const at of [0, Math.floor(e.storedLength / 2), e.storedLength - 1]) {
      const bad = Buffer.from(pack.bytes);
      bad[e.offset + at] ^= 0x01;
      assert.throws(
        () => decodeBlob(bad.subarray(e.offset, e.offset + e.storedLength), e),
        (err) => code(err) === 'E_INTEGRITY',
        `blob ${i} (${e.codec}) byte ${at}`,
      );
    }
  }
});

test('a corrupted index byte is detected', () => {
  const { pack } = build();
  const bad = Buffer.from(pack.bytes);
  bad[bad.length - PACK_FOOTER_SIZE - 3] ^= 0xff;
  assert.throws(
    () => parsePackIndex(bad),
    (err) => code(err) === 'E_INTEGRITY',
  );
});

test('a truncated or foreign pack is rejected (E_FORMAT)', () => {
  const { pack } = build();
  for (const len of [0, 10, PACK_FOOTER_SIZE - 1, pack.bytes.length - 1, pack.bytes.length - 30]) {
    assert.throws(
      () => parsePackIndex(pack.bytes.subarray(0, len)),
      (err) => code(err) === 'E_FORMAT',
      `length ${len}`,
    );
  }
  // Index bigger than what is there.
  const short = pack.bytes.subarray(pack.bytes.length - PACK_FOOTER_SIZE - 10);
  assert.throws(
    () => parsePackIndex(short),
    (err) => code(err) === 'E_FORMAT',
  );
  // Wrong version.
  const v2 = Buffer.from(pack.bytes);
  v2.writeUInt16LE(2, v2.length - PACK_FOOTER_SIZE + 36);
  assert.throws(
    () => parsePackIndex(v2),
    (err) => code(err) === 'E_FORMAT',
  );
  // Wrong magic.
  const magic = Buffer.from(pack.bytes);
  magic[magic.length - 1] = 0;
  assert.throws(
    () => parsePackIndex(magic),
    (err) => code(err) === 'E_FORMAT',
  );
  // Blob bytes of the wrong length.
  const e = pack.entries[0];
  assert.throws(
    () => decodeBlob(pack.bytes.subarray(e.offset, e.offset + e.storedLength - 1), e),
    (err) => code(err) === 'E_FORMAT',
  );
});
