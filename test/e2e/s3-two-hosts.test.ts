import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { appendFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ListObjectsV2Command } from '@aws-sdk/client-s3';
import { awcOk, cleanupMounts, copyTree, readTreeInfo } from '../helpers/cli.js';
import { freshBucket, S3_TEST_CREDENTIALS } from '../helpers/s3.js';
import { makeTempDir, removeTempDir } from '../helpers/temp-dir.js';
import { detectDriver } from '../../src/drivers/detect/detect-driver.js';
import { pathsOf } from '../../src/config/config.js';

/**
 * Two hosts, one catalog, one bucket: two homes (`AWC_HOME`, `AWC_HOST`), one shared SQLite
 * catalog file (`AWC_CATALOG=sqlite:<shared>/catalog.sqlite`; the PostgreSQL helper makes the
 * same test possible on postgres://) and one S3 bucket. What host A checkpoints, host B —
 * whose cache is empty — exports byte for byte. Host A takes its credentials from AWS_*
 * variables, host B from a credentials file and a profile (the SDK's default chain).
 */

const driver = detectDriver('auto').driver === 'overlay' ? 'overlay' : 'copy';

/** A directory that does not exist or holds nothing. */
function empty(dir: string): boolean {
  return !existsSync(dir) || readdirSync(dir).length === 0;
}

function sha256File(path: string): string {
  return createHash('sha256').update(readFileSync(path)).digest('hex');
}

/** A tree of a few hundred files, one of them large enough for many chunks and, with 1 MiB packs, several packs. */
function makeSource(root: string): void {
  mkdirSync(join(root, 'src', 'deep', 'er'), { recursive: true });
  for (let i = 0; i < 300; i++) writeFileSync(join(root, 'src', `f${i}.txt`), `file ${i}\n`.repeat(1 + (i % 50)));
  writeFileSync(join(root, 'src', 'deep', 'er', 'big.bin'), randomBytes(6 * 1024 * 1024 + 123));
  writeFileSync(join(root, 'empty'), '');
  symlinkSync('src/f1.txt', join(root, 'link'));
}

const NEW_BIN = randomBytes(2 * 1024 * 1024);

/** The edits made in host A's workspace (and to the expected copy). */
function edit(root: string): void {
  appendFileSync(join(root, 'src', 'f7.txt'), 'edited on host A\n');
  writeFileSync(join(root, 'src', 'deep', 'new.bin'), NEW_BIN);
  rmSync(join(root, 'src', 'f9.txt'));
  mkdirSync(join(root, 'added'));
  writeFileSync(join(root, 'added', 'note.md'), '# from host A\n');
}

test(`a snapshot checkpointed on host A exports byte-identical on host B with an empty cache (${driver} driver, S3, shared catalog)`, async (t) => {
  const work = await makeTempDir('awc-two-hosts-');
  const bucket = await freshBucket(t);
  const shared = join(work, 'shared');
  mkdirSync(shared, { mode: 0o700 });
  const common = {
    AWC_CATALOG: `sqlite:${join(shared, 'catalog.sqlite')}`,
    AWC_OBJECT_STORE: bucket.url('fleet/awc'),
    AWC_MOUNT_DRIVER: driver,
    AWC_PACK_BYTES: String(1024 * 1024),
    AWS_REGION: 'us-east-1',
    AWS_EC2_METADATA_DISABLED: 'true',
    AWS_CONFIG_FILE: join(work, 'no-aws-config'),
  };
  const homeA = join(work, 'host-a');
  const homeB = join(work, 'host-b');
  const credentials = join(work, 'aws-credentials');
  writeFileSync(
    credentials,
    `[awc-test]\naws_access_key_id = ${S3_TEST_CREDENTIALS.accessKeyId}\naws_secret_access_key = ${S3_TEST_CREDENTIALS.secretAccessKey}\n`,
    { mode: 0o600 },
  );
  const envA = { ...common, ...bucket.env, AWC_HOST: 'host-a', AWS_SHARED_CREDENTIALS_FILE: join(work, 'none') };
  const envB = {
    ...common,
    AWC_HOST: 'host-b',
    AWS_ACCESS_KEY_ID: '',
    AWS_SECRET_ACCESS_KEY: '',
    AWS_SESSION_TOKEN: '',
    AWS_PROFILE: 'awc-test',
    AWS_SHARED_CREDENTIALS_FILE: credentials,
  };
  t.after(async () => {
    cleanupMounts(homeA, work, envA); // (first: the daemon's content mount lives in the work directory)
    await removeTempDir(work);
  });

  const source = join(work, 'source');
  const expected = join(work, 'expected');
  makeSource(source);
  copyTree(source, expected);

  // Host A: import, fork, mount, edit, checkpoint, unmount.
  const imported = awcOk(homeA, ['snapshot', 'import', source, '--name', 'base'], envA);
  const [ws] = awcOk(homeA, ['fork', 'base', '--name', 'agent'], envA).workspaces;
  const mnt = join(work, 'mnt-a');
  awcOk(homeA, ['mount', ws.id, mnt], envA);
  edit(mnt);
  edit(expected);
  const cp = awcOk(homeA, ['checkpoint', ws.id, '-m', 'on host A'], envA);
  assert.equal(cp.changed, true);
  awcOk(homeA, ['unmount', ws.id], envA);
  const tarA = join(work, 'a.tar');
  awcOk(homeA, ['export', cp.id, '--tar', tarA], envA);

  const objects = (await bucket.client.send(new ListObjectsV2Command({ Bucket: bucket.name }))).Contents ?? [];
  const packs = objects.filter((o) => o.Key!.startsWith('fleet/awc/packs/'));
  assert.ok(packs.length >= 3, `several packs in the bucket (${packs.length})`);
  assert.deepEqual(
    objects.filter((o) => !o.Key!.startsWith('fleet/awc/packs/')).map((o) => o.Key),
    ['fleet/awc/meta/identity.json'],
    'every object under the prefix: the packs and the store identity (src/catalog/open/store-binding.ts)',
  );
  assert.ok(empty(join(homeA, 'objects')), 'host A keeps no object of its own');

  // Host B: a fresh home; its cache is empty. It sees A's snapshots through the shared catalog.
  const cacheB = pathsOf({ home: homeB }).cache;
  assert.ok(empty(cacheB), 'host B starts with an empty cache');
  const shown = awcOk(homeB, ['show', cp.id], envB);
  assert.equal(shown.id, cp.id);
  assert.equal(shown.parentId, imported.id);
  const outB = join(work, 'out-b');
  awcOk(homeB, ['export', cp.id, '--dir', outB, '--keep-privileges'], envB);
  assert.deepEqual(readTreeInfo(outB), readTreeInfo(expected), 'host B exports exactly the source with host A edits');
  const tarB = join(work, 'b.tar');
  const ex = awcOk(homeB, ['export', cp.id, '--tar', tarB], envB);
  assert.equal(ex.root, shown.root);
  assert.equal(sha256File(tarB), sha256File(tarA), 'the tar export is byte-identical on both hosts');
  assert.ok(empty(join(homeB, 'objects')), 'host B read everything from the bucket');
});
