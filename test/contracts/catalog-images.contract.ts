import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { sha256, type Digest } from '../../src/core/digest.js';
import type { Catalog, NewLayerImage } from '../../src/catalog/port/catalog.js';
import { rejectsWith } from '../helpers/assert-errors.js';
import { NS, snap } from '../helpers/catalog-fixtures.js';
import type { CatalogFactory } from './catalog.contract.js';
import { withAdapter } from './adapter-factory.js';

/** A new layer image record of `root`, its digests derived from `seed` (sizes past 2^32 to exercise bigint). */
function image(root: Digest, seed = 'a', builtBy = 'host-a'): NewLayerImage {
  return {
    root,
    image: sha256(`erofs/${seed}`),
    imageBytes: 5_000_000_123,
    index: sha256(`index/${seed}`),
    indexBytes: 16_000_000,
    builtBy,
  };
}

/**
 * The layer image part of the catalog contract (0007_layer_images, src/catalog/port/layer-images.ts;
 * docs/explanation/layer-images.md#sharing-images): one record per (namespace, root)
 * read back as written and stamped by the database's clock, first wins (in sequence and in a
 * race between two connections), the gc listing of records whose root no snapshot has, delete,
 * validation that writes nothing, and namespaces as boundaries.
 */
export function catalogImageContract(name: string, factory: CatalogFactory): void {
  const withCat = (fn: (cat: Catalog) => Promise<void>): Promise<void> => withAdapter(factory, fn);

  describe(`Catalog contract (layer images): ${name}`, () => {
    it('an absent record is undefined; a recorded one reads back as written, stamped with the database now', () =>
      withCat(async (cat) => {
        const root = sha256('root/1');
        assert.equal(await cat.layerImage(NS, root), undefined);
        assert.equal(await cat.layerImage('never-used', root), undefined, 'an unknown namespace');
        const before = await cat.nowMs();
        const rec = await cat.recordLayerImage(NS, image(root));
        const after = await cat.nowMs();
        assert.deepEqual({ ...rec, createdAt: 0 }, { ...image(root), createdAt: 0 });
        assert.equal(typeof rec.createdAt, 'number');
        assert.equal(typeof rec.imageBytes, 'number');
        assert.ok(rec.createdAt >= before - 5 && rec.createdAt <= after + 5, `${before} <= ${rec.createdAt} <= ${after}`);
        assert.ok(Math.abs(rec.createdAt - Date.now()) < 60_000, 'ms since the epoch');
        assert.deepEqual(await cat.layerImage(NS, root), rec);
      }));

    it('first wins: a second record of the root returns the first and leaves it', () =>
      withCat(async (cat) => {
        const root = sha256('root/2');
        const first = await cat.recordLayerImage(NS, image(root, 'a', 'host-a'));
        const second = await cat.recordLayerImage(NS, { ...image(root, 'b', 'host-b'), imageBytes: 7, indexBytes: 9 });
        assert.deepEqual(second, first);
        assert.deepEqual(await cat.layerImage(NS, root), first);
        assert.equal(first.image, sha256('erofs/a'));
        assert.equal(first.builtBy, 'host-a');
      }));

    it('two hosts recording one root at once both get the same record', async () => {
      const cat = await factory.create();
      const other = factory.connect ? await factory.connect(cat) : cat;
      try {
        for (let i = 0; i < 5; i++) {
          const root = sha256(`root/race/${i}`);
          const [a, b] = await Promise.all([
            cat.recordLayerImage(NS, image(root, `a${i}`, 'host-a')),
            other.recordLayerImage(NS, image(root, `b${i}`, 'host-b')),
          ]);
          assert.deepEqual(a, b, `round ${i}: one record`);
          assert.ok([sha256(`erofs/a${i}`), sha256(`erofs/b${i}`)].includes(a.image));
          assert.equal(a.index, a.builtBy === 'host-a' ? sha256(`index/a${i}`) : sha256(`index/b${i}`), 'the winner whole, not a mix');
          assert.deepEqual(await cat.layerImage(NS, root), a);
          assert.deepEqual(await other.layerImage(NS, root), a);
        }
      } finally {
        if (other !== cat) await other.close();
        await factory.cleanup(cat);
      }
    });

    it('lists for gc the records whose root is no snapshot root of the namespace', () =>
      withCat(async (cat) => {
        const kept = await cat.createSnapshot(snap());
        const orphan = sha256('root/orphan');
        const elsewhere = sha256('root/in-team-b');
        await cat.createSnapshot(snap({ namespace: 'team-b', root: elsewhere }));
        const keptRec = await cat.recordLayerImage(NS, image(kept.root, 'k'));
        const orphanRec = await cat.recordLayerImage(NS, image(orphan, 'o'));
        const elsewhereRec = await cat.recordLayerImage(NS, image(elsewhere, 'e'));
        const listed = await cat.layerImagesWithoutSnapshot(NS);
        assert.deepEqual(
          listed,
          [orphanRec, elsewhereRec].sort((x, y) => (x.root < y.root ? -1 : 1)),
          "a snapshot of another namespace does not hold this namespace's record",
        );
        assert.ok(!listed.some((r) => r.root === keptRec.root));
        assert.deepEqual(await cat.layerImagesWithoutSnapshot('team-b'), []);
        assert.deepEqual(await cat.layerImagesWithoutSnapshot('never-used'), []);
        await cat.removeSnapshot(NS, kept.id);
        assert.ok(
          (await cat.layerImagesWithoutSnapshot(NS)).some((r) => r.root === kept.root),
          'listed once its last snapshot is gone',
        );
      }));

    it('delete removes the record, and deleting an absent one is no error', () =>
      withCat(async (cat) => {
        const root = sha256('root/del');
        await cat.recordLayerImage(NS, image(root));
        await cat.deleteLayerImage(NS, root);
        assert.equal(await cat.layerImage(NS, root), undefined);
        assert.deepEqual(await cat.layerImagesWithoutSnapshot(NS), []);
        await cat.deleteLayerImage(NS, root);
        await cat.deleteLayerImage('never-used', root);
        const again = await cat.recordLayerImage(NS, image(root, 'next', 'host-b'));
        assert.equal(again.builtBy, 'host-b', 'after a delete the next record wins');
      }));

    it('namespaces are separate', () =>
      withCat(async (cat) => {
        const root = sha256('root/shared');
        const a = await cat.recordLayerImage(NS, image(root, 'a'));
        assert.equal(await cat.layerImage('team-b', root), undefined);
        const b = await cat.recordLayerImage('team-b', image(root, 'b'));
        assert.equal(b.image, sha256('erofs/b'), 'its own record, not the other namespace’s');
        await cat.deleteLayerImage('team-b', root);
        assert.deepEqual(await cat.layerImage(NS, root), a);
        assert.equal(await cat.layerImage('team-b', root), undefined);
      }));

    it('lists every record of every namespace with its namespace, by namespace and root', () =>
      withCat(async (cat) => {
        assert.deepEqual(await cat.listLayerImages(), []);
        const r1 = sha256('root/list/1');
        const r2 = sha256('root/list/2');
        const recs = [
          { ...(await cat.recordLayerImage(NS, image(r1, 'x'))), namespace: NS },
          { ...(await cat.recordLayerImage(NS, image(r2, 'y'))), namespace: NS },
          { ...(await cat.recordLayerImage('team-b', image(r1, 'z'))), namespace: 'team-b' },
        ];
        const order = (x: { namespace: string; root: string }, y: { namespace: string; root: string }): number =>
          x.namespace < y.namespace ? -1 : x.namespace > y.namespace ? 1 : x.root < y.root ? -1 : x.root > y.root ? 1 : 0;
        assert.deepEqual(await cat.listLayerImages(), recs.sort(order));
        await cat.deleteLayerImage(NS, r1);
        assert.deepEqual(
          await cat.listLayerImages(),
          recs.filter((r) => !(r.namespace === NS && r.root === r1)),
        );
      }));

    it('refuses a malformed record and writes nothing', () =>
      withCat(async (cat) => {
        const root = sha256('root/bad');
        await rejectsWith(cat.recordLayerImage(NS, { ...image(root), image: 'sha256:nothex' as Digest }), 'E_USAGE');
        await rejectsWith(cat.recordLayerImage(NS, { ...image(root), index: 'abc' as Digest }), 'E_USAGE');
        await rejectsWith(cat.recordLayerImage(NS, { ...image(root), root: 'sha256:' as Digest }), 'E_USAGE');
        await rejectsWith(cat.recordLayerImage(NS, { ...image(root), imageBytes: -1 }), 'E_USAGE');
        await rejectsWith(cat.recordLayerImage(NS, { ...image(root), indexBytes: 1.5 }), 'E_USAGE');
        await rejectsWith(cat.recordLayerImage(NS, { ...image(root), builtBy: '' }), 'E_USAGE');
        assert.equal(await cat.layerImage(NS, root), undefined);
      }));
  });
}
