import { chmod, lstat, mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { AwcError } from '../../core/errors.js';
import { gitCommonDir } from '../git/git-exclude.js';

/** The git hooks `--git-hooks` writes: after a merge (a pull) and after a checkout of a branch. */
export const PREPARE_HOOKS = ['post-merge', 'post-checkout'] as const;

/** The line that marks a hook as AWC's (rewritten by a later init; a hook without it is never touched). */
const MARK = '# awc: refresh the prepared snapshot (written by `awc init … --git-hooks`)';

/** What {@link installPrepareHooks} did, per hook: written (new or AWC's own, rewritten), or kept (the user's own hook). */
export interface GitHooksResult {
  /** The hooks directory (the repository's common `.git/hooks`), or null when `dir` is not a git checkout. */
  dir: string | null;
  written: string[];
  /** Hooks that exist and are not AWC's: left as they are. */
  kept: string[];
}

/**
 * `awc init … --git-hooks` (docs/how-to/cursor.md#keep-the-prepared-snapshot-following-main):
 * writes `post-merge` and `post-checkout` hooks into the repository's `.git/hooks` that run
 * `command` (shell words, e.g. the launcher and `prepare --update`) detached, output
 * discarded, so git never waits for it and never fails for it. Only when the user asks; a hook that
 * exists and is not AWC's (no marker line) is kept as it is (listed in `kept`). A
 * `post-checkout` of a single file (its third argument 0) does nothing.
 * @throws E_SYMLINK (a hook is a symbolic link), the fs error
 */
export async function installPrepareHooks(dir: string, command: string[]): Promise<GitHooksResult> {
  const common = await gitCommonDir(dir);
  if (common === null) return { dir: null, written: [], kept: [] };
  const hooks = join(common, 'hooks');
  await mkdir(hooks, { recursive: true });
  const out: GitHooksResult = { dir: hooks, written: [], kept: [] };
  for (const name of PREPARE_HOOKS) {
    const path = join(hooks, name);
    const st = await lstat(path).catch(() => undefined);
    if (st?.isSymbolicLink()) throw new AwcError('E_SYMLINK', `${path} is a symbolic link: not written through`, { details: { path } });
    if (st && !(await readFile(path, 'utf8')).includes(MARK)) {
      out.kept.push(name);
      continue;
    }
    const guard = name === 'post-checkout' ? '[ "$3" = 0 ] && exit 0  # a file checkout, not a branch\n' : '';
    const text = `#!/bin/sh\n${MARK}\n${guard}(${command.join(' ')} >/dev/null 2>&1 &)\nexit 0\n`;
    await writeFile(`${path}.awc-tmp`, text, { mode: 0o755 });
    await chmod(`${path}.awc-tmp`, 0o755);
    await rename(`${path}.awc-tmp`, path);
    out.written.push(name);
  }
  return out;
}
