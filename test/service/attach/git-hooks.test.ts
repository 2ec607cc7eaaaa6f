/**
 * `awc init … --git-hooks` (src/service/attach/git-hooks.ts): post-merge and post-checkout hooks
 * in the repository's common `.git/hooks` that run a command detached (git does not wait, and
 * never fails for it), a user's own hook kept, AWC's own rewritten, a file checkout ignored,
 * nothing outside a git checkout, and a real `git merge` running it.
 */
import { strict as assert } from 'node:assert';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { installPrepareHooks } from '../../../src/service/attach/git-hooks.js';
import { rejectsWith } from '../../helpers/assert-errors.js';

const git = (cwd: string, ...args: string[]): string =>
  execFileSync('git', ['-c', 'user.email=t@example.com', '-c', 'user.name=t', ...args], { cwd, encoding: 'utf8' });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('git hooks that refresh the prepared snapshot', () => {
  let work: string;
  let repo: string;
  before(() => {
    work = mkdtempSync(join(tmpdir(), 'awc-hooks-'));
    repo = join(work, 'repo');
    mkdirSync(repo);
    git(repo, 'init', '-q', '-b', 'main');
    writeFileSync(join(repo, 'a.txt'), 'a\n');
    git(repo, 'add', '.');
    git(repo, 'commit', '-qm', 'a');
  });
  after(() => rmSync(work, { recursive: true, force: true }));

  it('writes both hooks (0755), rewrites its own, keeps a user hook, and refuses a symlinked one', async () => {
    const marker = join(work, 'ran');
    const r = await installPrepareHooks(repo, ['touch', marker]);
    assert.deepEqual(r, { dir: join(repo, '.git', 'hooks'), written: ['post-merge', 'post-checkout'], kept: [] });
    for (const h of r.written) assert.equal(statSync(join(r.dir!, h)).mode & 0o777, 0o755);
    assert.match(readFileSync(join(r.dir!, 'post-checkout'), 'utf8'), /\[ "\$3" = 0 \] && exit 0/);
    // a file checkout does nothing; a branch checkout runs the command, detached
    execFileSync('sh', [join(r.dir!, 'post-checkout'), 'x', 'y', '0']);
    await sleep(300);
    assert.equal(existsSync(marker), false);
    git(repo, 'checkout', '-q', '-b', 'topic');
    for (let i = 0; i < 50 && !existsSync(marker); i++) await sleep(100);
    assert.equal(existsSync(marker), true, 'post-checkout ran the command');
    rmSync(marker);
    // a merge runs post-merge
    writeFileSync(join(repo, 'b.txt'), 'b\n');
    git(repo, 'add', '.');
    git(repo, 'commit', '-qm', 'b');
    git(repo, 'checkout', '-q', 'main');
    rmSync(marker, { force: true });
    git(repo, 'merge', '-q', '--ff-only', 'topic');
    for (let i = 0; i < 50 && !existsSync(marker); i++) await sleep(100);
    assert.equal(existsSync(marker), true, 'post-merge ran the command');
    // again: its own hooks are rewritten; a user's own post-merge is kept
    writeFileSync(join(r.dir!, 'post-merge'), '#!/bin/sh\necho mine\n');
    const again = await installPrepareHooks(repo, ['true']);
    assert.deepEqual(again.written, ['post-checkout']);
    assert.deepEqual(again.kept, ['post-merge']);
    assert.equal(readFileSync(join(r.dir!, 'post-merge'), 'utf8'), '#!/bin/sh\necho mine\n');
    rmSync(join(r.dir!, 'post-checkout'));
    symlinkSync('/dev/null', join(r.dir!, 'post-checkout'));
    await rejectsWith(installPrepareHooks(repo, ['true']), 'E_SYMLINK');
    rmSync(join(r.dir!, 'post-checkout'));
  });

  it('writes nothing outside a git checkout', async () => {
    const plain = join(work, 'plain');
    mkdirSync(plain);
    assert.deepEqual(await installPrepareHooks(plain, ['true']), { dir: null, written: [], kept: [] });
  });
});
