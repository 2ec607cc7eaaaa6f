import { test, describe, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { awc, awcOk, cleanupMounts, diffInfo, readTreeInfo } from '../../helpers/cli.js';

/**
 * `awc diff <ws> --patch` of a workspace with changes that are not checkpointed: the new
 * bytes are in no store yet, the patch reads them from the live state. On both drivers the
 * patch, applied with `git apply` to the head, gives the live tree.
 */
for (const driver of ['copy', 'overlay'] as const) {
  describe(`diff --patch of a live workspace (${driver} driver)`, () => {
    const work = mkdtempSync(join(tmpdir(), `awc-live-patch-${driver}-`));
    const home = join(work, 'home');
    const env = { AWC_MOUNT_DRIVER: driver };
    after(() => {
      cleanupMounts(home, work);
      rmSync(work, { recursive: true, force: true });
    });

    test('the patch holds the uncheckpointed bytes and applies to the head', () => {
      const src = join(work, 'src');
      mkdirSync(join(src, 'dir'), { recursive: true });
      writeFileSync(join(src, 'keep.txt'), 'same\n');
      writeFileSync(join(src, 'edit.txt'), 'line 1\nline 2\nline 3\n');
      writeFileSync(join(src, 'dir', 'gone.txt'), 'bye\n');
      awcOk(home, ['snapshot', 'import', src, '--name', 'base'], env);
      const ws = awcOk(home, ['fork', 'base'], env).workspaces[0].id;
      const mnt = join(work, 'mnt');
      awcOk(home, ['mount', ws, mnt], env);

      const fresh = `fresh ${randomBytes(8).toString('hex')}\n`; // bytes no store has
      writeFileSync(join(mnt, 'edit.txt'), `line 1\nline two, changed ${fresh}line 3\n`);
      writeFileSync(join(mnt, 'new.txt'), fresh.repeat(3));
      writeFileSync(join(mnt, 'dir', 'script.sh'), `#!/bin/sh\necho ${fresh}`);
      chmodSync(join(mnt, 'dir', 'script.sh'), 0o755);
      unlinkSync(join(mnt, 'dir', 'gone.txt'));

      const r = awc(home, ['diff', ws, '--patch'], env, { json: false });
      assert.equal(r.code, 0, r.stderr);
      const patch = r.stdout;
      assert.match(patch, /^\+line two, changed fresh [0-9a-f]{16}$/m);
      assert.match(patch, /^diff --git a\/new\.txt b\/new\.txt\nnew file mode 100644\n/m);
      assert.match(patch, /^deleted file mode 100644\n/m);

      // the same with --json: the patch is in the answer
      assert.equal(awcOk(home, ['diff', ws, '--patch'], env).patch, patch);

      // applied to the head, the patch gives the live tree
      const repo = join(work, 'repo');
      awcOk(home, ['export', 'base', '--dir', repo], env);
      execFileSync('git', ['init', '-q', repo]);
      writeFileSync(join(repo, '.git', 'live.patch'), patch);
      execFileSync('git', ['-C', repo, 'apply', '.git/live.patch']);
      const skipGit = (rel: string) => rel === '.git';
      assert.deepEqual(diffInfo(readTreeInfo(mnt), readTreeInfo(repo, skipGit)), new Map());
      assert.equal(readFileSync(join(repo, 'new.txt'), 'utf8'), fresh.repeat(3));
    });
  });
}
