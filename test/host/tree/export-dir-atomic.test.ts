/**
 * Issue 7 item 8 (the --dir half): `export --dir` writes beside the target under a
 * temporary name and the target appears only when complete; any failure (a corrupt pack,
 * a failing store) removes what was written; a non-empty target stays refused with a code
 * that is not retryable unless --overwrite, which replaces its entries.
 */
import { test, describe, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import {
  lstatSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  rmSync,
  statSync,
  writeFileSync,
  writeSync,
  closeSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { awc as runAwc, awcOk, readTreeInfo } from '../../helpers/cli.js';
import { CountingStore } from '../../helpers/counting-store.js';
import { AwcError } from '../../../src/core/errors.js';
import { Awc } from '../../../src/service/workspace/awc.js';
import { exportDir } from '../../../src/host/tree/export-dir.js';
import { ContentReader } from '../../../src/store/content/content-reader.js';

/** Every regular file under `dir` with its size (the packs). */
function files(dir: string): { path: string; size: number }[] {
  const out: { path: string; size: number }[] = [];
  for (const n of readdirSync(dir)) {
    const p = join(dir, n);
    const st = lstatSync(p);
    if (st.isDirectory()) out.push(...files(p));
    else if (st.isFile()) out.push({ path: p, size: st.size });
  }
  return out;
}

describe('export --dir appears only when complete', () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-export-dir-'));
  const env = { AWC_MOUNT_DRIVER: 'copy' };
  const src = join(work, 'src');
  let home: string;
  let snap: string;
  before(() => {
    mkdirSync(join(src, 'sub'), { recursive: true });
    writeFileSync(join(src, 'a.txt'), 'first\n');
    writeFileSync(join(src, 'sub', 'b.txt'), 'second\n');
    writeFileSync(join(src, 'z-big.bin'), randomBytes(4 * 1024 * 1024));
    home = join(work, 'home');
    snap = awcOk(home, ['snapshot', 'import', src], env).id;
  });
  after(() => rmSync(work, { recursive: true, force: true }));

  test('a non-empty target → E_TARGET_EXISTS (not retryable), untouched; --overwrite replaces its entries', () => {
    const target = join(work, 'busy');
    mkdirSync(join(target, 'old-dir'), { recursive: true });
    writeFileSync(join(target, 'old.txt'), 'mine\n');
    writeFileSync(join(target, 'a.txt'), 'stale\n');
    const r = runAwc(home, ['export', snap, '--dir', target], env);
    assert.equal(r.code, 4, r.stderr);
    const e = JSON.parse(r.stderr.trim().split('\n').pop()!);
    assert.equal(e.code, 'E_TARGET_EXISTS');
    assert.equal(e.retryable, false);
    assert.deepEqual(readdirSync(target).sort(), ['a.txt', 'old-dir', 'old.txt']);
    assert.equal(readFileSync(join(target, 'a.txt'), 'utf8'), 'stale\n');
    awcOk(home, ['export', snap, '--dir', target, '--overwrite'], env);
    assert.deepEqual(readTreeInfo(target), readTreeInfo(src));
    assert.deepEqual(
      readdirSync(work).filter((n) => n.startsWith('.awc-')),
      [],
      'nothing is left beside the target',
    );
  });

  test('an empty target directory and a missing one both receive the tree; nothing is left beside them', () => {
    const empty = join(work, 'empty');
    mkdirSync(empty);
    awcOk(home, ['export', snap, '--dir', empty], env);
    assert.deepEqual(readTreeInfo(empty), readTreeInfo(src));
    const missing = join(work, 'new', 'deeper', 'out');
    awcOk(home, ['export', snap, '--dir', missing], env);
    assert.deepEqual(readTreeInfo(missing), readTreeInfo(src));
    assert.deepEqual(readdirSync(join(work, 'new', 'deeper')), ['out']);
  });

  test('a corrupt pack: E_INTEGRITY, no target and no temporary directory left (an empty target stays as it was)', () => {
    const home2 = join(work, 'home-corrupt');
    const snap2 = awcOk(home2, ['snapshot', 'import', src], env).id;
    const pack = files(join(home2, 'objects')).sort((x, y) => y.size - x.size)[0];
    assert.ok(pack.size > 4 * 1024 * 1024, 'the big file is in the largest pack');
    const fd = openSync(pack.path, 'r+');
    const b = Buffer.alloc(1);
    readSync(fd, b, 0, 1, pack.size >> 1);
    b[0] ^= 0x55;
    writeSync(fd, b, 0, 1, pack.size >> 1);
    closeSync(fd);
    const parent = join(work, 'corrupt-out');
    mkdirSync(parent);
    const r = runAwc(home2, ['export', snap2, '--dir', join(parent, 'out')], env);
    assert.notEqual(r.code, 0);
    assert.equal(JSON.parse(r.stderr.trim().split('\n').pop()!).code, 'E_INTEGRITY', r.stderr);
    assert.deepEqual(readdirSync(parent), [], 'no partial tree and no temporary directory');
    mkdirSync(join(parent, 'empty'));
    const r2 = runAwc(home2, ['export', snap2, '--dir', join(parent, 'empty')], env);
    assert.notEqual(r2.code, 0);
    assert.deepEqual(readdirSync(parent), ['empty']);
    assert.deepEqual(readdirSync(join(parent, 'empty')), []);
    assert.ok(statSync(join(parent, 'empty')).isDirectory());
  });

  test('a store that fails midway (fault injection): the failure is reported and nothing is left', async () => {
    const a = await Awc.open({ home, mountDriver: 'copy' });
    try {
      const s = await a.getSnapshot(snap);
      const store = new CountingStore(a.store);
      let reads = 0;
      store.fail = () => ++reads > 3; // the root and trees come through, then the file reads fail
      const reader = new ContentReader({ store, index: a.catalog.blobIndex(a.namespace) });
      const parent = join(work, 'fault-out');
      mkdirSync(parent);
      await assert.rejects(exportDir(reader, s.root, join(parent, 'out')), (e: unknown) => e instanceof AwcError);
      assert.ok(reads > 3, 'the export got past its start');
      assert.deepEqual(readdirSync(parent), []);
    } finally {
      await a.close();
    }
  });
});
