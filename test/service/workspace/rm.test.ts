/**
 * `awc rm` (src/service/workspace/remove.ts, Catalog.removeSnapshot): catalog rows only, the refusals
 * of docs/explanation/gc.md#rm-removes-rows-never-bytes, and what --force does. Real SQLite,
 * real FsObjectStore, the copy driver (a real bind mount as root).
 */
import { strict as assert } from 'node:assert';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Awc } from '../../../src/service/workspace/awc.js';
import { writeHostState } from '../../../src/drivers/port/workspace-state.js';
import { rejectsWith } from '../../helpers/assert-errors.js';
import { awc as cli, cleanupMounts, errorOf } from '../../helpers/cli.js';

describe('awc rm', () => {
  let work: string;
  let home: string;
  let src: string;
  let svc: Awc;

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'awc-rm-'));
    home = join(work, 'home');
    src = join(work, 'src');
    mkdirSync(src);
    writeFileSync(join(src, 'a.txt'), 'alpha\n');
    svc = await Awc.open({ home, mountDriver: 'copy' });
  });
  after(async () => {
    await svc.close();
    cleanupMounts(home, work);
    rmSync(work, { recursive: true, force: true });
  });

  it('refuses a snapshot that is a head (even with --force), a base or the parent of a named snapshot; --force re-bases and re-parents', async () => {
    const base = await svc.importSnapshot(src, { name: 'rm-base' });
    const [ws] = await svc.fork(base.id, { name: 'rm-ws' });
    let e = await rejectsWith(svc.rm(base.id), 'E_IN_USE');
    assert.deepEqual(e.details?.workspaces, [ws!.id]);
    e = await rejectsWith(svc.rm(base.id, { force: true }), 'E_IN_USE');
    assert.match(e.message, /head/);

    // move the head: base is then only the workspace's base
    const dir = join(work, 'mnt1');
    await svc.mount(ws!.id, dir);
    writeFileSync(join(dir, 'b.txt'), 'beta\n');
    const cp = await svc.checkpoint(ws!.id);
    assert.equal(cp.changed, true);
    await svc.unmount(ws!.id);
    e = await rejectsWith(svc.rm('rm-base'), 'E_IN_USE');
    assert.match(e.message, /base/);
    // a named child of the base
    const child = await svc.catalog.createSnapshot({
      namespace: 'default',
      root: base.root,
      parentId: base.id,
      name: 'rm-child',
      fileCount: 1,
      byteCount: 6,
      packs: [],
    });
    const r = await svc.rm(base.id, { force: true });
    assert.equal(r.kind, 'snapshot');
    assert.deepEqual(r.rebased, [ws!.id]);
    assert.deepEqual(new Set(r.reparented), new Set([child.id, cp.id]));
    await rejectsWith(svc.getSnapshot(base.id), 'E_NOT_FOUND');
    const after = await svc.getWorkspace(ws!.id);
    assert.equal(after.baseSnapshotId, cp.id, 'without a parent, the base becomes the head');
    assert.equal((await svc.getSnapshot(cp.id)).parentId, null);
  });

  it('refuses the parent of a named snapshot without --force, re-parents unnamed children without it', async () => {
    const p = await svc.importSnapshot(src);
    const q = await svc.catalog.createSnapshot({
      namespace: 'default',
      root: p.root,
      parentId: p.id,
      fileCount: 1,
      byteCount: 6,
      packs: [],
    });
    const n = await svc.catalog.createSnapshot({
      namespace: 'default',
      root: p.root,
      parentId: q.id,
      name: 'rm-named',
      fileCount: 1,
      byteCount: 6,
      packs: [],
    });
    const e = await rejectsWith(svc.rm(q.id), 'E_IN_USE');
    assert.deepEqual(e.details?.snapshots, [n.id]);
    const r = await svc.rm(p.id); // its child q is unnamed
    assert.deepEqual(r.reparented, [q.id]);
    assert.equal((await svc.getSnapshot(q.id)).parentId, null);
    assert.equal((await svc.getSnapshot(n.id)).parentId, q.id);
  });

  it('refuses the layer snapshot of a workspace, even with --force', async () => {
    const s = await svc.importSnapshot(src);
    const [w] = await svc.fork(s.id);
    const s2 = await svc.importSnapshot(src);
    await svc.catalog.setLayerSnapshot(w!.id, s2.id);
    const e = await rejectsWith(svc.rm(s2.id, { force: true }), 'E_IN_USE');
    assert.match(e.message, /layer/);
    await svc.catalog.setLayerSnapshot(w!.id, null);
    await svc.rm(s2.id);
  });

  it("a mounted workspace is refused; --force unmounts it here and removes it; never another host's mount", async () => {
    const s = await svc.importSnapshot(src);
    const [w] = await svc.fork(s.id);
    const dir = join(work, 'mnt2');
    await svc.mount(w!.id, dir);
    writeFileSync(join(dir, 'c.txt'), 'uncheckpointed\n');
    const e = await rejectsWith(svc.rm(w!.id), 'E_ALREADY_MOUNTED');
    assert.match(e.hint, /--force/);
    const r = await svc.rm(w!.id, { force: true });
    assert.equal(r.unmounted, true);
    await rejectsWith(svc.getWorkspace(w!.id), 'E_NOT_FOUND');
    assert.equal(existsSync(join(dir, 'c.txt')), false);

    const [w2] = await svc.fork(s.id);
    await svc.catalog.setMount(w2!.id, { path: '/elsewhere', driver: 'copy', host: 'another-host' });
    const e2 = await rejectsWith(svc.rm(w2!.id, { force: true }), 'E_ALREADY_MOUNTED');
    assert.match(e2.message, /another-host/);
    assert.ok(await svc.getWorkspace(w2!.id));
  });

  it('uncheckpointed changes kept on this host are refused; --force drops them', async () => {
    const s = await svc.importSnapshot(src);
    const [w] = await svc.fork(s.id);
    await writeHostState(svc.paths.workspaces, {
      v: 1,
      workspaceId: w!.id,
      namespace: 'default',
      driver: 'copy',
      target: join(work, 'gone'),
      layerSnapshotId: s.id,
      layerRoot: s.root,
    });
    await rejectsWith(svc.rm(w!.id), 'E_IN_USE');
    const r = await svc.rm(w!.id, { force: true });
    assert.equal(r.discarded, true);
    await rejectsWith(svc.getWorkspace(w!.id), 'E_NOT_FOUND');
  });

  it('the CLI: --json result, and the error code with its exit status', async () => {
    const s = await svc.importSnapshot(src);
    const [w] = await svc.fork(s.id, { name: 'rm-cli' });
    let r = cli(home, ['rm', s.id]);
    assert.equal(r.code, 4);
    assert.equal(errorOf(r).code, 'E_IN_USE');
    r = cli(home, ['rm', 'workspace:rm-cli']);
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(r.json, { kind: 'workspace', id: w!.id });
    r = cli(home, ['rm', s.id]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.json.kind, 'snapshot');
    r = cli(home, ['rm', s.id]);
    assert.equal(r.code, 3);
    assert.equal(errorOf(r).code, 'E_NOT_FOUND');
  });
});
