/**
 * src/core/git-index.ts against real git: index versions 2, 3 (an extended flag) and 4
 * (prefix-compressed paths), a sha256 repository; the rewritten index is read by git with the
 * new stat data and every other field unchanged; UNTR is dropped, TREE kept; a split index
 * is refused; a corrupt file is E_FORMAT.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { makeTempDir, removeTempDir } from '../helpers/temp-dir.js';
import { gitBlobId, gitIndexUnrewritable, parseGitIndex, rewriteGitIndexStat, type GitHashAlgo } from '../../src/core/git-index.js';
import { AwcError } from '../../src/core/errors.js';

function git(cwd: string, ...args: string[]): string {
  return execFileSync('git', ['-c', 'user.name=T', '-c', 'user.email=t@example.org', ...args], { cwd, encoding: 'utf8' }).trim();
}

let tmp: string;
before(async () => {
  tmp = await makeTempDir('awc-gitindex-');
});
after(async () => {
  await removeTempDir(tmp);
});

/** A repository with nested paths sharing prefixes (what v4 compresses), at index `version`. */
function repoAt(name: string, version: number, algo: GitHashAlgo): string {
  const dir = join(tmp, name);
  mkdirSync(join(dir, 'src', 'lib'), { recursive: true });
  git(dir, 'init', '-q', `--object-format=${algo}`);
  for (const p of ['a.txt', 'src/ab.txt', 'src/lib/one.ts', 'src/lib/onetwo.ts', 'src/lib/two.ts', 'src/main.ts', 'z.txt']) {
    writeFileSync(join(dir, p), `content of ${p}\n`);
  }
  git(dir, 'add', '.');
  git(dir, 'commit', '-q', '-m', 'c');
  git(dir, 'update-index', `--index-version=${version}`);
  if (version === 3) git(dir, 'update-index', '--skip-worktree', 'z.txt');
  return dir;
}

describe('git index files', () => {
  for (const [version, algo] of [
    [2, 'sha1'],
    [3, 'sha1'],
    [4, 'sha1'],
    [4, 'sha256'],
  ] as const) {
    it(`v${version} ${algo}: parsed as git lists it; rewritten stat data is what git then reads`, () => {
      const dir = repoAt(`r${version}${algo}`, version, algo);
      const buf = readFileSync(join(dir, '.git', 'index'));
      const ix = parseGitIndex(buf, algo);
      assert.equal(ix.version, version);
      const stage = git(dir, 'ls-files', '--stage').split('\n');
      assert.deepEqual(
        ix.entries.map((e) => `${e.mode.toString(8)} ${e.oid} ${e.stage}\t${e.path}`),
        stage,
      );
      assert.equal(ix.entries[0].oid, gitBlobId(algo, readFileSync(join(dir, 'a.txt'))));
      assert.equal(ix.entries.find((e) => e.path === 'z.txt')!.notCheckedOut, version === 3);
      const stats = new Map([
        [2, { ctimeSec: 11, ctimeNsec: 12, mtimeSec: 13, mtimeNsec: 14, dev: 0, ino: 4_000_000_000, uid: 7, gid: 8, size: 99 }],
      ]);
      const out = rewriteGitIndexStat(buf, ix, algo, stats);
      writeFileSync(join(dir, '.git', 'index'), out);
      // git verifies the trailing hash on every read
      assert.deepEqual(git(dir, 'ls-files', '--stage').split('\n'), stage);
      const debug = git(dir, 'ls-files', '--debug', ix.entries[2].path);
      assert.match(debug, /ctime: 11:12\n/);
      assert.match(debug, /mtime: 13:14\n/);
      assert.match(debug, /ino: 4000000000\n/);
      assert.match(debug, /uid: 7\tgid: 8\n/);
      assert.match(debug, /size: 99\t/);
      // every other entry keeps its bytes
      const again = parseGitIndex(out, algo);
      for (const [i, e] of ix.entries.entries()) {
        if (i === 2) continue;
        const len = again.entries[i + 1]?.offset ?? again.entriesEnd;
        assert.deepEqual(out.subarray(e.offset, len), buf.subarray(e.offset, len), e.path);
      }
    });
  }

  it('keeps TREE, drops UNTR; refuses a split index; a corrupt file is E_FORMAT', () => {
    const dir = repoAt('ext', 2, 'sha1');
    git(dir, 'config', 'core.untrackedCache', 'true');
    git(dir, 'update-index', '--untracked-cache');
    git(dir, 'status', '--porcelain');
    git(dir, 'write-tree');
    const buf = readFileSync(join(dir, '.git', 'index'));
    const ix = parseGitIndex(buf, 'sha1');
    assert.deepEqual(
      ix.extensions.map((e) => e.sig),
      ['TREE', 'UNTR'],
    );
    const out = rewriteGitIndexStat(buf, ix, 'sha1', new Map());
    assert.deepEqual(
      parseGitIndex(out, 'sha1').extensions.map((e) => e.sig),
      ['TREE'],
    );
    writeFileSync(join(dir, '.git', 'index'), out);
    assert.equal(git(dir, 'status', '--porcelain'), '');

    const bad = Buffer.from(buf);
    bad[20] ^= 1;
    assert.throws(
      () => parseGitIndex(bad, 'sha1'),
      (e: unknown) => e instanceof AwcError && e.code === 'E_FORMAT' && /checksum/.test(e.message),
    );
    assert.throws(
      () => parseGitIndex(Buffer.from('not an index at all, no'), 'sha1'),
      (e: unknown) => e instanceof AwcError && e.code === 'E_FORMAT',
    );

    git(dir, 'update-index', '--split-index');
    const split = parseGitIndex(readFileSync(join(dir, '.git', 'index')), 'sha1');
    assert.match(gitIndexUnrewritable(split) ?? '', /split index/);
    assert.throws(
      () => rewriteGitIndexStat(readFileSync(join(dir, '.git', 'index')), split, 'sha1', new Map()),
      (e: unknown) => e instanceof AwcError && e.code === 'E_FORMAT',
    );
  });
});
