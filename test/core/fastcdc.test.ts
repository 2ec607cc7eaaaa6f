import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { AVG_SIZE, Chunker, chunkBuffer, GEAR, MASK_L, MASK_S, MAX_SIZE, MIN_SIZE } from '../../src/core/fastcdc.js';
import { CHUNKER_ID } from '../../src/core/tree.js';

/** Deterministic pseudo-random bytes: sha256(`${seed} ${i}`) for i = 0, 1, … concatenated. */
function det(n: number, seed = 'awc-fastcdc-test'): Buffer {
  const out = Buffer.alloc(n);
  for (let i = 0, o = 0; o < n; i++, o += 32) createHash('sha256').update(`${seed} ${i}`).digest().copy(out, o);
  return out;
}

function sha(s: string | Uint8Array): string {
  return createHash('sha256').update(s).digest('hex');
}

/** Chunks `data` through a streaming Chunker fed in pieces of the given sizes (cycled). */
function streamed(data: Uint8Array, sizes: number[]): Uint8Array[] {
  const c = new Chunker();
  const out: Uint8Array[] = [];
  let off = 0;
  for (let k = 0; off < data.length; k++) {
    const n = Math.min(sizes[k % sizes.length], data.length - off);
    out.push(...c.push(data.subarray(off, off + n)).map((x) => Buffer.from(x)));
    off += n;
  }
  const last = c.finish();
  if (last) out.push(last);
  return out;
}

// Pinned once (computed with this implementation) and fixed forever: a change here kills dedup.
const PINNED_4MIB = [
  25442, 75085, 79536, 77796, 79745, 80220, 71684, 72018, 71737, 72018, 73034, 31211, 83127, 66254, 109305, 77067, 78181, 94183, 120789,
  74372, 72651, 70779, 100193, 68452, 86204, 72347, 71226, 35033, 65351, 68172, 69688, 102853, 93072, 62460, 86960, 70770, 25044, 83469,
  48595, 52951, 80623, 77920, 42907, 25556, 58861, 84902, 71501, 71229, 69231, 86253, 104796, 103330, 108779, 26977, 69857, 90103, 95068,
  7337,
];

test('parameters match CHUNKER_ID and the documented masks', () => {
  assert.equal(CHUNKER_ID, `fastcdc2020-awc1-${MIN_SIZE}-${AVG_SIZE}-${MAX_SIZE}`);
  assert.equal(MIN_SIZE, 16384);
  assert.equal(AVG_SIZE, 65536);
  assert.equal(MAX_SIZE, 262144);
  assert.equal(MASK_S, 0xffffc000);
  assert.equal(MASK_L, 0xfffc0000);
});

test('gear table is the pinned derivation', () => {
  assert.equal(GEAR.length, 256);
  const be = Buffer.alloc(1024);
  GEAR.forEach((v, i) => be.writeUInt32BE(v, i * 4));
  // The table is sha256("awc fastcdc gear v1 0") ‖ … ‖ sha256("awc fastcdc gear v1 31").
  const expect = Buffer.concat(Array.from({ length: 32 }, (_, j) => createHash('sha256').update(`awc fastcdc gear v1 ${j}`).digest()));
  assert.deepEqual(be, expect);
  assert.equal(sha(be), '8d635fe130c8626bdba5fbd27d168cf13d70ed77e164fdf08b6f5977f13a6606');
  assert.equal(GEAR[0], 2676328464);
  assert.equal(GEAR[255], 2607966641);
});

test('cut points are stable for known input (pinned)', () => {
  const data = det(4 << 20);
  const lengths = chunkBuffer(data);
  assert.deepEqual(lengths, PINNED_4MIB);
  assert.equal(sha(lengths.join(',')), 'c0cd621b28466a83ac1c8d2d74372ba631fa98eac6efbc60fdc935f825caa505');
});

test('bounds: every chunk but the last in [MIN+1, MAX], lengths sum to the input', () => {
  for (const data of [randomBytes(8 << 20), det(3 << 20, 'other'), Buffer.alloc(1 << 20, 0x61)]) {
    const lengths = chunkBuffer(data);
    assert.equal(
      lengths.reduce((a, b) => a + b, 0),
      data.length,
    );
    lengths.slice(0, -1).forEach((l) => assert.ok(l > MIN_SIZE && l <= MAX_SIZE, `chunk of ${l} bytes`));
    const last = lengths[lengths.length - 1];
    assert.ok(last >= 1 && last <= MAX_SIZE);
  }
});

test('constant data is cut at MAX_SIZE', () => {
  const lengths = chunkBuffer(Buffer.alloc(MAX_SIZE * 3 + 5));
  assert.deepEqual(lengths, [MAX_SIZE, MAX_SIZE, MAX_SIZE, 5]);
});

test('small inputs: empty has no chunk, up to MIN is one chunk', () => {
  assert.deepEqual(chunkBuffer(new Uint8Array(0)), []);
  assert.deepEqual(chunkBuffer(det(1)), [1]);
  assert.deepEqual(chunkBuffer(det(4000)), [4000]);
  assert.deepEqual(chunkBuffer(det(MIN_SIZE)), [MIN_SIZE]);
  const c = new Chunker();
  assert.deepEqual(c.push(det(MIN_SIZE)), []);
  assert.equal(c.finish()?.length, MIN_SIZE);
  assert.equal(c.finish(), undefined);
});

test('streaming in odd-sized pushes gives the same chunks as one shot', () => {
  const data = Buffer.concat([det(3 << 20), Buffer.alloc(700_000), randomBytes(1 << 20)]);
  const oneShot = chunkBuffer(data);
  let off = 0;
  const expected = oneShot.map((l) => data.subarray(off, (off += l)));
  for (const sizes of [[1 << 22], [1], [7, 4093], [65537], [16384], [MIN_SIZE + 1, 3], [262143, 262145, 1]]) {
    // Single-byte pushes on the whole input are slow: use a 600 KiB prefix for them.
    const input = sizes[0] === 1 ? data.subarray(0, 600_000) : data;
    const got = streamed(input, sizes);
    const want = sizes[0] === 1 ? chunkBuffer(input) : oneShot;
    assert.deepEqual(
      got.map((x) => x.length),
      want,
      `pushes of ${sizes.join('/')}`,
    );
    if (input === data) got.forEach((c, i) => assert.ok(Buffer.from(c).equals(expected[i])));
  }
});

test('a chunker is reusable after finish', () => {
  const a = det(1 << 20, 'a');
  const c = new Chunker();
  const first = [...c.push(a), c.finish()!].map((x) => x.length);
  const second = [...c.push(a), c.finish()!].map((x) => x.length);
  assert.deepEqual(first, second);
  assert.deepEqual(first, chunkBuffer(a));
});

function chunkDigests(data: Buffer): string[] {
  let off = 0;
  return chunkBuffer(data).map((l) => sha(data.subarray(off, (off += l))));
}

test('an edit in the middle only changes nearby chunks', () => {
  const data = det(8 << 20, 'edit');
  const before = chunkDigests(data);
  // Overwrite 100 bytes at 4 MiB.
  const edited = Buffer.from(data);
  edited.fill(0x5a, 4 << 20, (4 << 20) + 100);
  const after = chunkDigests(edited);
  const kept = after.filter((d) => before.includes(d)).length;
  assert.ok(after.length - kept <= 2, `overwrite changed ${after.length - kept} chunks`);
  // Insert 1000 bytes at 4 MiB: the cut points after it shift with the content.
  const inserted = Buffer.concat([data.subarray(0, 4 << 20), randomBytes(1000), data.subarray(4 << 20)]);
  const shifted = chunkDigests(inserted);
  const keptIns = shifted.filter((d) => before.includes(d)).length;
  assert.ok(shifted.length - keptIns <= 3, `insert changed ${shifted.length - keptIns} chunks`);
  assert.ok(keptIns >= before.length - 3);
});

test('average chunk size on random data is near the target', () => {
  const lengths = chunkBuffer(det(32 << 20, 'avg'));
  const avg = (32 << 20) / lengths.length;
  assert.ok(avg > 48 * 1024 && avg < 96 * 1024, `average ${avg}`);
});

/**
 * The cut rule of the module doc, one byte at a time, as the chunker was first written:
 * the reference the unrolled gear loop must match exactly (cut points are durable).
 */
function referenceLengths(data: Uint8Array): number[] {
  const out: number[] = [];
  let s = 0;
  while (s < data.length) {
    let len = data.length - s;
    let h = 0;
    for (let l = MIN_SIZE + 1; l <= Math.min(MAX_SIZE, data.length - s); l++) {
      h = ((h << 1) + GEAR[data[s + l - 1]]!) >>> 0;
      if ((h & (l <= AVG_SIZE ? MASK_S : MASK_L)) >>> 0 === 0 || l === MAX_SIZE) {
        len = l;
        break;
      }
    }
    out.push(len);
    s += len;
  }
  return out;
}

test('cut points equal the byte-at-a-time reference on random data, in one shot and streamed', () => {
  const inputs = [
    randomBytes(6 << 20),
    det(2 << 20, 'reference'),
    // low entropy: long runs reach the MAX cut and the easier mask past AVG
    Buffer.concat([Buffer.alloc(300_000, 7), randomBytes(200_000), Buffer.alloc(600_000), randomBytes(70_001)]),
  ];
  for (const size of [0, 1, MIN_SIZE, MIN_SIZE + 1, MIN_SIZE + 7, AVG_SIZE + 3, MAX_SIZE - 1, MAX_SIZE + 5]) inputs.push(randomBytes(size));
  let cuts = 0;
  for (const data of inputs) {
    const want = referenceLengths(data);
    cuts += want.length;
    assert.deepEqual(chunkBuffer(data), want, `one shot, ${data.length} bytes`);
    for (const sizes of [[4 << 20], [65_531, 9], [MIN_SIZE + 3, 5, 1]]) {
      assert.deepEqual(
        streamed(data, sizes).map((c) => c.length),
        want,
        `pushes of ${sizes.join('/')}, ${data.length} bytes`,
      );
    }
  }
  // Every position of the unrolled loop (a cut after each of the 8 bytes of a step) is met.
  const lens = inputs.flatMap((d) => referenceLengths(d).slice(0, -1));
  assert.ok(cuts > 100);
  assert.equal(new Set(lens.map((l) => (l - MIN_SIZE) % 8)).size, 8);
});
