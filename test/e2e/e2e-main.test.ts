import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { ListObjectsV2Command } from '@aws-sdk/client-s3';
import {
  lstatSync,
  appendFileSync,
  chmodSync,
  existsSync,
  linkSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { awc, awcOk, cleanupMounts, copyTree, diffInfo, errorOf, PROJECT, readTreeInfo } from '../helpers/cli.js';
import { detectDriver } from '../../src/drivers/detect/detect-driver.js';
import { freshDatabase, type FreshDatabase } from '../helpers/postgres.js';
import { freshBucket, type TestBucket } from '../helpers/s3.js';

/**
 * The main job end to end, through the CLI as a user runs it, on a real tree: a copy of
 * this project's checkout with its installed node_modules (thousands of real files). It runs
 * with each mount driver on the embedded catalog (SQLite), and once more on the fleet's
 * catalog: PostgreSQL (a fresh database, `AWC_CATALOG=postgres://…`) with the file object store.
 */

/** The same edits, applied to a mounted workspace and to a native copy (the oracle). */
function applyEdits(root: string): void {
  writeFileSync(join(root, 'NEW_FILE.txt'), 'created in the workspace\n');
  mkdirSync(join(root, 'newdir', 'sub'), { recursive: true });
  writeFileSync(join(root, 'newdir', 'sub', 'file.txt'), 'nested new file\n');
  writeFileSync(join(root, 'newdir', 'empty'), '');
  appendFileSync(join(root, 'README.md'), '\nA line added by an agent.\n');
  appendFileSync(join(root, 'node_modules', 'kysely', 'package.json'), '\n');
  rmSync(join(root, 'tsconfig.json'));
  rmSync(join(root, 'node_modules', 'tar-stream'), { recursive: true });
  // a directory deleted and recreated: opaque
  rmSync(join(root, 'src', 'cli'), { recursive: true });
  mkdirSync(join(root, 'src', 'cli'));
  writeFileSync(join(root, 'src', 'cli', 'replacement.ts'), 'export const x = 1;\n');
  chmodSync(join(root, 'scripts', 'setup.mjs'), 0o755);
  chmodSync(join(root, 'src', 'core', 'errors.ts'), 0o600);
  chmodSync(join(root, 'docs'), 0o700);
  symlinkSync('README.md', join(root, 'link-rel'));
  symlinkSync('/etc/hostname', join(root, 'link-abs'));
  symlinkSync('does/not/exist', join(root, 'link-dangling'));
  renameSync(join(root, '.gitignore'), join(root, 'gitignore.txt'));
  renameSync(join(root, 'src', 'core', 'time.ts'), join(root, 'src', 'store', 'time-moved.ts'));
  renameSync(join(root, 'src', 'catalog'), join(root, 'src', 'catalog-renamed'));
  renameSync(join(root, 'src', 'daemon'), join(root, 'docs', 'daemon-moved'));
  linkSync(join(root, 'NEW_FILE.txt'), join(root, 'NEW_FILE-link.txt'));
}

const skipGitIndex = (rel: string) => rel === '.git/index';

const overlayPossible = detectDriver('auto').driver === 'overlay';
// Each driver on the embedded backends (SQLite, a directory), and a fleet's backends: a PostgreSQL
// catalog (test/helpers/postgres.ts) and an S3 bucket (`AWC_OBJECT_STORE=s3://<fresh bucket>/awc?endpoint=…`,
// test/helpers/s3.ts).
// The first run takes the whole checkout (its dev dependencies too: ~21,000 entries); the other
// two take it with its runtime dependencies only (as `npm ci --omit=dev` installs them: ~11,000
// entries), which keeps every case the edits touch and halves their copying (CI time).
const runs = [
  { driver: 'overlay', catalog: 'sqlite', store: 'file', tree: 'full' },
  { driver: 'copy', catalog: 'sqlite', store: 'file', tree: 'runtime' },
  { driver: overlayPossible ? 'overlay' : 'copy', catalog: 'postgres', store: 's3', tree: 'runtime' },
] as const;

/** Removes from `root/node_modules` every top-level package the lockfile marks `dev` (what `npm ci --omit=dev` leaves out). */
function dropDevDependencies(root: string): number {
  const lock = JSON.parse(readFileSync(join(root, 'package-lock.json'), 'utf8')) as { packages: Record<string, { dev?: boolean }> };
  let dropped = 0;
  for (const [key, pkg] of Object.entries(lock.packages)) {
    if (!pkg.dev || !key.startsWith('node_modules/') || key.slice('node_modules/'.length).includes('/node_modules/')) continue;
    rmSync(join(root, key), { recursive: true, force: true });
    dropped++;
  }
  return dropped;
}

for (const { driver, catalog, store, tree } of runs) {
  const possible = driver === 'copy' || overlayPossible;
  describe(
    `main job end to end (${driver} driver${catalog === 'postgres' ? ', PostgreSQL catalog' : ''}${store === 's3' ? ', S3 object store' : ''})`,
    { skip: possible ? false : 'overlay is not possible on this host (see awc doctor)' },
    () => {
      const work = mkdtempSync(join(tmpdir(), `awc-e2e-${driver}-${catalog}-${store}-`));
      const home = join(work, 'home');
      const source = join(work, 'source');
      const expected = join(work, 'expected');
      const env: NodeJS.ProcessEnv = { AWC_MOUNT_DRIVER: driver };
      let database: FreshDatabase | undefined;
      let bucket: TestBucket | undefined;
      let snapId = '';
      /** Whether the import shared its snapshot's layer image (its JSON's `image`). */
      let sharedImage = false;
      let wsIds: string[] = [];
      let mounts: string[] = [];
      let original: Map<string, ReturnType<typeof readTreeInfo> extends Map<string, infer V> ? V : never>;

      before(async () => {
        if (catalog === 'postgres') {
          database = await freshDatabase();
          env.AWC_CATALOG = database.url;
        }
        if (store === 's3') {
          bucket = await freshBucket();
          Object.assign(env, bucket.env, { AWC_OBJECT_STORE: bucket.url('awc') });
        }
        copyTree(PROJECT, source);
        // the test's own build output changes while tests run: keep the tree still
        rmSync(join(source, 'dist'), { recursive: true, force: true });
        if (tree === 'runtime') assert.ok(dropDevDependencies(source) > 0, 'the lockfile names dev dependencies');
        assert.ok(existsSync(join(source, 'node_modules', 'kysely')), 'the checkout has its node_modules installed');
        copyTree(source, expected);
        original = readTreeInfo(source, skipGitIndex);
        assert.ok(original.size > 1000, `a real tree with thousands of entries (got ${original.size})`);
      });

      after(async () => {
        cleanupMounts(home, work, env);
        rmSync(work, { recursive: true, force: true });
        await database?.drop();
        await bucket?.remove();
      });

      test('import prints the snapshot id with counts', () => {
        const r = awcOk(home, ['snapshot', 'import', source, '--name', 'base'], env);
        snapId = r.id;
        sharedImage = r.image !== null;
        assert.match(r.id, /^sn_[0-9a-z]+$/);
        assert.equal(r.name, 'base');
        // regular files, each hardlinked inode once
        const inodes = new Set<string>();
        for (const [p, n] of readTreeInfo(source)) if (n.type === 'file') inodes.add(String(lstatSync(join(source, p)).ino));
        assert.equal(r.files, inodes.size);
        assert.ok(r.bytes > 10_000_000);
        const ls = awcOk(home, ['snapshot', 'ls'], env);
        assert.deepEqual(
          ls.snapshots.map((s: { id: string }) => s.id),
          [snapId],
        );
        // the catalog is where AWC_CATALOG says: no SQLite file beside the objects
        assert.equal(existsSync(join(home, 'catalog.sqlite')), catalog === 'sqlite');
      });

      if (store === 's3')
        test('the packs are in the bucket under the prefix; the home holds none', async () => {
          const r = await bucket!.client.send(new ListObjectsV2Command({ Bucket: bucket!.name }));
          const keys = (r.Contents ?? []).map((o) => o.Key!);
          // packs, the git proof records of imported checkouts, layer images (with their content indexes) and the
          // store's identity (docs/reference/formats.md), all under the prefix
          const pack = /^awc\/packs\/[0-9a-f]{2}\/[0-9a-f]{64}$/;
          const proof = /^awc\/gitproof\/[0-9a-f]{2}\/[0-9a-f]{64}$/;
          const image = /^awc\/images\/[0-9a-f]{2}\/[0-9a-f]{64}$/;
          const identity = 'awc/meta/identity.json';
          assert.ok(keys.includes(identity), keys.join(', '));
          assert.ok(
            keys.some((k) => pack.test(k)) && keys.every((k) => pack.test(k) || proof.test(k) || image.test(k) || k === identity),
            keys.join(', '),
          );
          // an import that shares its snapshot's layer image (a PostgreSQL catalog, the overlay driver) stored it here
          assert.equal(
            keys.some((k) => image.test(k)),
            sharedImage,
            `a layer image as the import said: ${keys.join(', ')}`,
          );
          const objects = join(home, 'objects');
          assert.ok(!existsSync(objects) || readdirSync(objects).length === 0, "nothing in the home's objects directory");
        });

      test('fork three workspaces and mount them', () => {
        const r = awcOk(home, ['fork', 'base', '--name', 'agent', '--count', '3'], env);
        assert.equal(r.workspaces.length, 3);
        wsIds = r.workspaces.map((w: { id: string }) => w.id);
        assert.deepEqual(
          r.workspaces.map((w: { name: string }) => w.name),
          ['agent-1', 'agent-2', 'agent-3'],
        );
        mounts = wsIds.map((_, i) => join(work, `mnt-${i + 1}`));
        for (let i = 0; i < 3; i++) {
          const m = awcOk(home, ['mount', wsIds[i], mounts[i]], env);
          assert.equal(m.driver, driver);
          assert.equal(m.path, mounts[i]);
        }
        const ls = awcOk(home, ['ls'], env);
        assert.equal(ls.workspaces.filter((w: { mountState: string }) => w.mountState === 'mounted').length, 3);
        const again = awc(home, ['mount', wsIds[0], join(work, 'elsewhere')], env);
        assert.notEqual(again.code, 0);
        assert.equal(errorOf(again).code, 'E_ALREADY_MOUNTED');
      });

      test('edit one workspace; git and node work inside it', () => {
        applyEdits(mounts[0]);
        applyEdits(expected);
        const st = execFileSync('git', ['--no-optional-locks', 'status', '--porcelain'], { cwd: mounts[0], encoding: 'utf8' });
        assert.match(st, /README\.md/);
        assert.match(st, /tsconfig\.json/);
        const out = execFileSync(
          process.execPath,
          ['-e', 'const k = require("kysely"); console.log(typeof k.Kysely, require("./package.json").name)'],
          { cwd: mounts[0], encoding: 'utf8' },
        );
        assert.equal(out.trim(), 'function awc');
        assert.deepEqual(
          readTreeInfo(mounts[0], skipGitIndex),
          readTreeInfo(expected, skipGitIndex),
          'the mounted view shows exactly the edits',
        );
      });

      test('checkpoint, then diff lists exactly the changes', () => {
        const cp = awcOk(home, ['checkpoint', wsIds[0], '-m', 'edits'], env);
        assert.match(cp.id, /^sn_/);
        assert.notEqual(cp.id, snapId);
        const ws = awcOk(home, ['show', wsIds[0]], env);
        assert.equal(ws.headSnapshotId, cp.id);
        const d = awcOk(home, ['diff', snapId, cp.id], env);
        const now = readTreeInfo(expected, skipGitIndex);
        const want = diffInfo(original, now);
        // the oracle knows additions and deletions: a rename is both, and must keep the content
        const got = new Map<string, string>();
        for (const c of d.changes as { path: string; status: string; from?: string }[]) {
          if (c.status !== 'renamed') {
            got.set(c.path, c.status);
            continue;
          }
          got.set(c.from!, 'deleted');
          got.set(c.path, 'added');
          const { mode: _a, ...was } = original.get(c.from!)!;
          const { mode: _b, ...is } = now.get(c.path)!;
          assert.deepEqual(is, was, `the rename ${c.from} → ${c.path} keeps the content`);
        }
        assert.ok(
          d.changes.some(
            (c: { status: string; from?: string; path: string }) =>
              c.status === 'renamed' && c.from === 'src/daemon' && c.path === 'docs/daemon-moved',
          ),
          'the directory moved across directories is a rename',
        );
        assert.deepEqual(new Map([...got].sort()), new Map([...want].sort()));
        // a checkpoint with no further change makes no new snapshot
        const again = awcOk(home, ['checkpoint', wsIds[0]], env);
        assert.equal(again.id, cp.id);
        assert.equal(again.changed, false);
        // the patch applies with git
        const patch = awc(home, ['diff', snapId, cp.id, '--patch'], env, { json: false });
        assert.equal(patch.code, 0, patch.stderr);
        assert.match(patch.stdout, /^diff --git a\/README\.md b\/README\.md$/m);
      });

      test('export --dir of the checkpoint equals the original with the edits; --tar round trip keeps the root digest', () => {
        const ws = awcOk(home, ['show', wsIds[0]], env);
        const out = join(work, 'exported');
        awcOk(home, ['export', ws.headSnapshotId, '--dir', out, '--keep-privileges'], env);
        assert.deepEqual(readTreeInfo(out, skipGitIndex), readTreeInfo(expected, skipGitIndex));
        const tar = join(work, 'cp.tar');
        const ex = awcOk(home, ['export', ws.headSnapshotId, '--tar', tar], env);
        const re = awcOk(home, ['snapshot', 'import', tar], env);
        const snap = awcOk(home, ['show', ws.headSnapshotId], env);
        assert.equal(re.root, snap.root);
        assert.equal(ex.root, snap.root);
      });

      test('the two other workspaces still equal the original tree', () => {
        assert.deepEqual(readTreeInfo(mounts[1], skipGitIndex), original);
        const d = awcOk(home, ['diff', wsIds[2]], env);
        assert.deepEqual(d.changes, []);
      });

      test('unmount all; the targets are empty again', () => {
        for (let i = 0; i < 3; i++) awcOk(home, ['unmount', wsIds[i]], env);
        const ls = awcOk(home, ['ls'], env);
        assert.ok(ls.workspaces.every((w: { mountState: string }) => w.mountState === 'unmounted'));
        const again = awc(home, ['unmount', wsIds[0]], env);
        assert.equal(errorOf(again).code, 'E_NOT_MOUNTED');
        // the checkpointed workspace mounts again at its new head
        const m = awcOk(home, ['mount', wsIds[0], mounts[0]], env);
        assert.equal(m.resumed, false);
        assert.deepEqual(readTreeInfo(mounts[0], skipGitIndex), readTreeInfo(expected, skipGitIndex));
        awcOk(home, ['unmount', wsIds[0]], env);
      });
    },
  );
}
