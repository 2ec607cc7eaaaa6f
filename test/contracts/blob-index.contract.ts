import { strict as assert } from 'node:assert';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { sha256, type Digest } from '../../src/core/digest.js';
import type { BlobIndex, BlobLocation, WrittenPack } from '../../src/store/pack/pack-types.js';
import type { AdapterFactory } from './adapter-factory.js';
import { mkPack } from '../helpers/catalog-fixtures.js';

/**
 * A blob index under test and how the suite records packs in it (the port itself only
 * looks up: the SQL catalog records packs with a snapshot, `MemoryBlobIndex` with `addPacks`).
 */
export interface BlobIndexUnderTest {
  index: BlobIndex;
  /** Records every blob of `packs` (as `ContentWriter.flush` returns them). */
  record(packs: readonly WrittenPack[]): Promise<void>;
}

/**
 * The contract every `BlobIndex` adapter passes (src/store/pack/pack-types.ts): `lookup` of
 * nothing, of unknown and of known digests (exact locations, offsets past 2^32 as numbers,
 * every kind and codec), duplicate input, thousands of digests in one call, a digest recorded
 * twice keeping its first location, and two writers recording one digest at once.
 *
 * Usage, in the adapter's test file: `blobIndexContract('MemoryBlobIndex', { create, cleanup })`.
 */
export function blobIndexContract(name: string, factory: AdapterFactory<BlobIndexUnderTest>): void {
  describe(`BlobIndex contract: ${name}`, () => {
    let t: BlobIndexUnderTest;
    beforeEach(async () => {
      t = await factory.create();
    });
    afterEach(async () => {
      await factory.cleanup(t);
    });

    it('lookup of no digests, or of unknown ones, is an empty map', async () => {
      assert.equal((await t.index.lookup([])).size, 0);
      assert.equal((await t.index.lookup([sha256('unknown/0'), sha256('unknown/1')])).size, 0);
      await t.record([mkPack('packs/a', 2, 'a')]);
      assert.equal((await t.index.lookup([])).size, 0);
      const found = await t.index.lookup([sha256('unknown/0'), sha256('a/1')]);
      assert.deepEqual([...found.keys()], [sha256('a/1')]);
    });

    it('a recorded blob is found at its exact location; every kind and codec; offsets past 2^32 are numbers', async () => {
      const key = 'packs/kinds';
      const blobs: BlobLocation[] = [
        { digest: sha256('k/chunk'), kind: 'chunk', codec: 'lz4', pack: key, offset: 0, storedLength: 90, rawLength: 100 },
        { digest: sha256('k/tree'), kind: 'tree', codec: 'none', pack: key, offset: 90, storedLength: 50, rawLength: 50 },
        { digest: sha256('k/root'), kind: 'root', codec: 'none', pack: key, offset: 5_000_000_000, storedLength: 0, rawLength: 0 },
      ];
      await t.record([{ key, size: 5_000_000_000, blobs }]);
      const found = await t.index.lookup(blobs.map((b) => b.digest));
      assert.equal(found.size, 3);
      for (const b of blobs) assert.deepEqual(found.get(b.digest), b);
      assert.equal(typeof found.get(sha256('k/root'))!.offset, 'number');
    });

    it('lookup dedups its input and answers thousands of digests in one call', async () => {
      await t.record([mkPack('packs/big1', 3000, 'big1'), mkPack('packs/big2', 2000, 'big2')]);
      const wanted: Digest[] = [];
      for (let i = 0; i < 3000; i += 2) wanted.push(sha256(`big1/${i}`));
      for (let i = 0; i < 200; i++) wanted.push(sha256(`missing/${i}`));
      wanted.push(sha256('big2/1999'), sha256('big2/1999'), sha256('big1/0'));
      const found = await t.index.lookup(wanted);
      assert.equal(found.size, 1501);
      assert.equal(found.get(sha256('big1/2998'))!.offset, 5_000_000_000 + 2998 * 100);
      assert.equal(found.get(sha256('big2/1999'))!.pack, 'packs/big2');
      assert.equal(found.has(sha256('missing/7')), false);
    });

    it('a digest recorded again (same or another pack) keeps its first location', async () => {
      const first = mkPack('packs/first', 10, 'dup');
      await t.record([first]);
      await t.record([first]); // idempotent
      await t.record([mkPack('packs/second', 20, 'dup')]);
      const found = await t.index.lookup(Array.from({ length: 20 }, (_, i) => sha256(`dup/${i}`)));
      assert.equal(found.size, 20);
      for (let i = 0; i < 10; i++) assert.deepEqual(found.get(sha256(`dup/${i}`)), first.blobs[i]);
      assert.equal(found.get(sha256('dup/15'))!.pack, 'packs/second');
    });

    it('two writers recording one digest at once: one location, the same on every lookup', async () => {
      const a = mkPack('packs/ra', 100, 'race');
      const b = mkPack('packs/rb', 100, 'race');
      await Promise.all([t.record([a]), t.record([b])]);
      const digests = a.blobs.map((x) => x.digest);
      const found = await t.index.lookup(digests);
      assert.equal(found.size, 100);
      for (const [i, d] of digests.entries()) {
        const loc = found.get(d)!;
        assert.ok(loc.pack === 'packs/ra' || loc.pack === 'packs/rb');
        assert.deepEqual(loc, loc.pack === 'packs/ra' ? a.blobs[i] : b.blobs[i]);
      }
      assert.deepEqual(await t.index.lookup(digests), found);
    });
  });
}
