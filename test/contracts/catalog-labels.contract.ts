import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import type { Catalog } from '../../src/catalog/port/catalog.js';
import { rejectsWith } from '../helpers/assert-errors.js';
import { NS, snap } from '../helpers/catalog-fixtures.js';
import type { CatalogFactory } from './catalog.contract.js';
import { withAdapter } from './adapter-factory.js';

/**
 * The labels part of the catalog contract (0004_labels, src/catalog/port/labels.ts): labels given
 * at creation and fork, read back on every lookup, changed by setLabels (set, delete, merge),
 * list filters, validation that writes nothing, and namespaces as boundaries.
 */
export function catalogLabelContract(name: string, factory: CatalogFactory): void {
  const withCat = (fn: (cat: Catalog) => Promise<void>): Promise<void> => withAdapter(factory, fn);

  describe(`Catalog contract (labels): ${name}`, () => {
    it('keeps labels given at creation and at fork, and reads them back on every lookup', () =>
      withCat(async (cat) => {
        const plain = await cat.createSnapshot(snap());
        assert.deepEqual(plain.labels, {});
        const s = await cat.createSnapshot(snap({ name: 'env', labels: { 'awc.env-key': 'abc', team: 'x' } }));
        assert.deepEqual(s.labels, { 'awc.env-key': 'abc', team: 'x' });
        assert.deepEqual((await cat.getSnapshot(NS, 'env')).labels, s.labels);
        const ws = await cat.forkWorkspaces(NS, s.id, [null, 'named'], { labels: { 'awc.claude.session': 's1' } });
        for (const w of ws) assert.deepEqual(w.labels, { 'awc.claude.session': 's1' });
        assert.deepEqual((await cat.getWorkspace(NS, 'named')).labels, { 'awc.claude.session': 's1' });
        const [unlabelled] = await cat.forkWorkspaces(NS, s.id, [null]);
        assert.deepEqual(unlabelled!.labels, {});
        assert.deepEqual((await cat.getWorkspace(NS, unlabelled!.id)).labels, {});
      }));

    it('filters lists by every given label', () =>
      withCat(async (cat) => {
        const a = await cat.createSnapshot(snap({ labels: { k: '1', team: 'x' } }));
        const b = await cat.createSnapshot(snap({ labels: { k: '2', team: 'x' } }));
        await cat.createSnapshot(snap());
        assert.deepEqual(
          (await cat.listSnapshots(NS, { labels: { team: 'x' } })).map((r) => r.id),
          [b.id, a.id],
        );
        assert.deepEqual(
          (await cat.listSnapshots(NS, { labels: { team: 'x', k: '1' } })).map((r) => r.id),
          [a.id],
        );
        assert.equal((await cat.listSnapshots(NS, { labels: { k: '3' } })).length, 0);
        assert.equal((await cat.listSnapshots(NS)).length, 3);
        const [w1] = await cat.forkWorkspaces(NS, a.id, [null], { labels: { who: 'one' } });
        await cat.forkWorkspaces(NS, a.id, [null], { labels: { who: 'two' } });
        assert.deepEqual(
          (await cat.listWorkspaces(NS, { labels: { who: 'one' } })).map((r) => r.id),
          [w1!.id],
        );
        assert.equal((await cat.listWorkspaces(NS, {})).length, 2);
      }));

    it('setLabels sets, replaces and deletes keys in one change, and lookups see it', () =>
      withCat(async (cat) => {
        const s = await cat.createSnapshot(snap({ labels: { a: '1', b: '2' } }));
        assert.deepEqual(await cat.setLabels('snapshot', NS, s.id, { b: '3', c: '4', a: null }), { b: '3', c: '4' });
        assert.deepEqual((await cat.getSnapshot(NS, s.id)).labels, { b: '3', c: '4' });
        const [w] = await cat.forkWorkspaces(NS, s.id, [null]);
        assert.deepEqual(await cat.setLabels('workspace', NS, w!.id, { x: 'y' }), { x: 'y' });
        assert.deepEqual((await cat.getWorkspace(NS, w!.id)).labels, { x: 'y' });
        assert.deepEqual((await cat.getSnapshot(NS, s.id)).labels, { b: '3', c: '4' }, "the base's labels are its own");
        assert.deepEqual(await cat.setLabels('workspace', NS, w!.id, { gone: null }), { x: 'y' }, 'deleting a missing key is a no-op');
      }));

    it('refuses bad keys, values and too many labels, and writes nothing', () =>
      withCat(async (cat) => {
        await rejectsWith(cat.createSnapshot(snap({ name: 'bad', labels: { 'Bad Key': 'v' } })), 'E_USAGE');
        assert.equal((await cat.listSnapshots(NS)).length, 0, 'no snapshot row from a refused create');
        const s = await cat.createSnapshot(snap({ labels: { a: '1' } }));
        await rejectsWith(cat.forkWorkspaces(NS, s.id, [null], { labels: { ok: 'line\nbreak' } }), 'E_USAGE');
        assert.equal((await cat.listWorkspaces(NS)).length, 0, 'no workspace from a refused fork');
        await rejectsWith(cat.setLabels('snapshot', NS, s.id, { '-x': '1' }), 'E_USAGE');
        await rejectsWith(cat.setLabels('snapshot', NS, s.id, { big: 'v'.repeat(1025) }), 'E_USAGE');
        const many = Object.fromEntries(Array.from({ length: 64 }, (_, i) => [`k${i}`, 'v']));
        await rejectsWith(cat.setLabels('snapshot', NS, s.id, many), 'E_USAGE'); // 65 with the one there
        assert.deepEqual((await cat.getSnapshot(NS, s.id)).labels, { a: '1' }, 'refused changes wrote nothing');
      }));

    it('setLabels finds rows only in their namespace', () =>
      withCat(async (cat) => {
        const s = await cat.createSnapshot(snap());
        const other = await cat.createSnapshot(snap({ namespace: 'other' }));
        await rejectsWith(cat.setLabels('snapshot', 'other', s.id, { a: '1' }), 'E_NOT_FOUND');
        await rejectsWith(cat.setLabels('snapshot', NS, other.id, { a: '1' }), 'E_NOT_FOUND');
        await rejectsWith(cat.setLabels('workspace', NS, s.id, { a: '1' }), 'E_NOT_FOUND'); // a snapshot id is no workspace
        await rejectsWith(cat.setLabels('snapshot', 'nowhere', s.id, { a: '1' }), 'E_NOT_FOUND');
        assert.deepEqual((await cat.getSnapshot(NS, s.id)).labels, {});
      }));
  });
}
