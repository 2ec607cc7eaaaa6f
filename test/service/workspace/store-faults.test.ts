/**
 * Issue 12, "Crash safety": a fault-injecting object store (test/helpers/fault-store.ts, wrapping
 * the real FsObjectStore or S3ObjectStore) fails, times out, fills up, or returns short or
 * corrupt bodies in the middle of a checkpoint of a mounted workspace (the copy driver,
 * through the service layer). Each case asserts the stable code and a hint, that the head did not
 * move, that every earlier snapshot still exports exactly what it held, and that the next
 * checkpoint succeeds and holds the workspace. A read that comes back corrupt or short once is
 * read again and succeeds; twice, it is E_INTEGRITY. Real SQLite, a real store under the faults.
 */
import { strict as assert } from 'node:assert';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { ErrorCode } from '../../../src/core/errors.js';
import { Awc } from '../../../src/service/workspace/awc.js';
import { NO_DAEMON } from '../../../src/service/workspace/no-daemon.js';
import { S3ObjectStore } from '../../../src/store/s3/s3-object-store.js';
import { rejectsWith } from '../../helpers/assert-errors.js';
import { cleanupMounts, readTreeInfo, type NodeInfo } from '../../helpers/cli.js';
import { exportedTree } from '../../helpers/crash-check.js';
import { FaultStore, type FaultRule } from '../../helpers/fault-store.js';
import { assertEveryBlobStored } from '../../helpers/gc-fixtures.js';
import { freshBucket, type TestBucket } from '../../helpers/s3.js';

const PACKS = (k: string): boolean => k.startsWith('packs/');

for (const backend of ['fs', 's3'] as const) {
  describe(`object store faults mid-checkpoint (${backend === 'fs' ? 'directory' : 'S3'} store)`, () => {
    let work: string;
    let opened: Awc;
    let svc: Awc;
    let fault: FaultStore;
    let ws: string;
    let mnt: string;
    /** Every committed snapshot and the tree it must export. */
    const known = new Map<string, Map<string, NodeInfo>>();
    let edits = 0;

    /** What the backend's adapter reports for a broken backend, and for one that timed out. */
    const BROKEN: ErrorCode = backend === 'fs' ? 'E_IO' : 'E_OBJECT_STORE_UNAVAILABLE';

    let bucket: TestBucket | undefined;

    before(async () => {
      work = mkdtempSync(join(tmpdir(), `awc-faults-${backend}-`));
      opened = await Awc.open({ home: join(work, 'home'), mountDriver: 'copy', packBytes: 1 << 20 });
      if (backend === 's3') bucket = await freshBucket();
      const inner = bucket ? new S3ObjectStore(bucket.options('awc/')) : opened.store;
      fault = new FaultStore(inner, backend);
      svc = Awc.over(opened.config, opened.catalog, fault, NO_DAEMON);
      const src = join(work, 'src');
      mkdirSync(join(src, 'sub'), { recursive: true });
      writeFileSync(join(src, 'a.txt'), 'alpha\n');
      writeFileSync(join(src, 'sub', 'b.txt'), 'beta\n'.repeat(500));
      const base = await svc.importSnapshot(src, { name: 'base' });
      known.set(base.id, readTreeInfo(src));
      ws = (await svc.fork('base', { name: 'w' }))[0]!.id;
      mnt = join(work, 'mnt');
      await svc.mount(ws, mnt);
    });
    after(async () => {
      await svc.unmount(ws, { discard: true }).catch(() => undefined);
      await opened.close();
      await bucket?.remove();
      cleanupMounts(join(work, 'home'), work);
      rmSync(work, { recursive: true, force: true });
    });

    /** New content in the workspace: more than one 1 MiB pack of incompressible bytes, an edit, a new file. */
    function edit(): void {
      const n = edits++;
      writeFileSync(join(mnt, `big-${n}.bin`), randomBytes(1_300_000));
      writeFileSync(join(mnt, 'a.txt'), `alpha, edit ${n}\n`);
      writeFileSync(join(mnt, 'sub', `new-${n}.txt`), `new ${n}\n`);
    }

    /** Every snapshot made so far exports exactly what it held; every blob of every row is stored. */
    async function earlierReadable(): Promise<void> {
      for (const [id, tree] of known) assert.deepEqual(await exportedTree(svc, id, work), tree, `snapshot ${id} exports as it was`);
      await assertEveryBlobStored(svc);
    }

    /** A checkpoint that must succeed and hold the workspace as it is now. */
    async function checkpointHolds(): Promise<string> {
      const want = readTreeInfo(mnt);
      const head = (await svc.getWorkspace(ws)).headSnapshotId;
      const cp = await svc.checkpoint(ws);
      assert.equal(cp.changed, true);
      assert.equal(cp.parent, head);
      assert.deepEqual(await exportedTree(svc, cp.id, work), want, 'the checkpoint holds the workspace');
      known.set(cp.id, want);
      return cp.id;
    }

    /** Edits, arms `rules`, and asserts the checkpoint fails with `code` and a hint, leaving everything as it was; then recovers. */
    async function failsCleanly(rules: FaultRule[], code: ErrorCode): Promise<void> {
      edit();
      const head = (await svc.getWorkspace(ws)).headSnapshotId;
      const fired = fault.fired.length;
      for (const r of rules) fault.inject(r);
      const err = await rejectsWith(svc.checkpoint(ws), code);
      fault.clear();
      assert.ok(fault.fired.length > fired, 'the fault fired');
      assert.ok(err.hint.length > 0, `${code} carries a hint`);
      assert.equal((await svc.getWorkspace(ws)).headSnapshotId, head, 'the head did not move');
      await earlierReadable();
      await checkpointHolds();
      await earlierReadable();
    }

    it(`a failing upload of the first pack: ${BROKEN}`, () => failsCleanly([{ op: 'put', fault: 'fail', key: PACKS }], BROKEN));

    it(`a failing upload of the second pack, after the first went up: ${BROKEN}`, () =>
      failsCleanly([{ op: 'put', fault: 'fail', nth: 2, key: PACKS }], BROKEN));

    it(`an upload that hangs past the client timeout: ${BROKEN}, retryable`, async () => {
      await failsCleanly([{ op: 'put', fault: 'timeout', key: PACKS }], BROKEN);
      if (backend === 's3') assert.equal(fault.fired.at(-1)?.fault, 'timeout');
    });

    it('a store that fills up on the first pack: E_NO_SPACE', () => failsCleanly([{ op: 'put', fault: 'full', key: PACKS }], 'E_NO_SPACE'));

    it('a store that fills up on the second pack: E_NO_SPACE', () =>
      failsCleanly([{ op: 'put', fault: 'full', nth: 2, key: PACKS }], 'E_NO_SPACE'));

    it(`failing reads of the base's trees: ${BROKEN}`, () => failsCleanly([{ op: 'get', fault: 'fail', times: Infinity }], BROKEN));

    it('reads that always come back corrupt: E_INTEGRITY', () =>
      failsCleanly([{ op: 'get', fault: 'corrupt', times: Infinity }], 'E_INTEGRITY'));

    it('reads that always come back short: E_INTEGRITY', () =>
      failsCleanly([{ op: 'get', fault: 'short', times: Infinity }], 'E_INTEGRITY'));

    it('a read that comes back corrupt once is read again: the checkpoint succeeds', async () => {
      edit();
      const fired = fault.fired.length;
      fault.inject({ op: 'get', fault: 'corrupt' });
      await checkpointHolds();
      fault.clear();
      assert.deepEqual(
        fault.fired.slice(fired).map((f) => f.fault),
        ['corrupt'],
      );
      await earlierReadable();
    });

    it('a read that comes back short once is read again: the checkpoint succeeds', async () => {
      edit();
      const fired = fault.fired.length;
      fault.inject({ op: 'get', fault: 'short' });
      await checkpointHolds();
      fault.clear();
      assert.deepEqual(
        fault.fired.slice(fired).map((f) => f.fault),
        ['short'],
      );
      await earlierReadable();
    });

    it('an export whose reads come back corrupt twice fails with E_INTEGRITY and writes no partial tree', async () => {
      const [id] = [...known.keys()];
      const out = join(work, 'corrupt-export');
      fault.inject({ op: 'get', fault: 'corrupt', times: Infinity });
      await rejectsWith(svc.export(id!, { dir: out }), 'E_INTEGRITY');
      fault.clear();
      assert.throws(() => readTreeInfo(out), /ENOENT/, 'nothing is left at the target');
      await earlierReadable();
    });
  });
}
