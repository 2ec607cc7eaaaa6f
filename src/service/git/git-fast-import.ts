import { once } from 'node:events';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { GitExportReader, GitWrite } from './git-export-plan.js';
import { GitFailure, runGit, spawnGit } from './git-run.js';
import { nameToBytes } from '../../core/raw-name.js';
import { quoteGitPath } from '../diff/patch.js';

/**
 * One commit through `git fast-import` (docs/explanation/git.md "Why fast-import"): the
 * parent's tree plus deletions and writes, streamed (blob contents come chunk by chunk from
 * the content reader), the branch updated by fast-import itself, which refuses a tip that is
 * not an ancestor of the new commit unless forced. No index and no work tree of the
 * repository are touched. Format: git-fast-import(1).
 */

/** An author or committer: a name and an email (no `<`, `>` or newline: fast-import's ident syntax). */
export interface GitIdent {
  name: string;
  email: string;
}

/** What {@link fastImportCommit} writes. */
export interface FastImportCommit {
  /** Full ref to update (`refs/heads/B`). */
  ref: string;
  parent: string;
  message: string;
  author: GitIdent;
  committer: GitIdent;
  /** Seconds since the epoch (UTC, `+0000`). */
  timeS: number;
  deletes: readonly string[];
  writes: readonly GitWrite[];
  /** Update the ref even when its tip is not an ancestor of the new commit. */
  force: boolean;
}

/** A path as fast-import reads it: always C-quoted as git quotes (see quoteGitPath: `"`, `\`, control and non-ASCII bytes escaped, the latter in octal). */
export function quotePath(path: string): string {
  return quoteGitPath(path, true);
}

/** An identity fast-import accepts: `<`, `>` and control characters removed, never empty. */
export function cleanIdent(i: GitIdent): GitIdent {
  // eslint-disable-next-line no-control-regex -- removing control characters is the point
  const clean = (s: string, dflt: string) => s.replace(/[<>\u0000-\u001f\u007f]/g, '').trim() || dflt;
  return { name: clean(i.name, 'AWC'), email: clean(i.email, 'awc@localhost') };
}

/**
 * Streams the commit into `git fast-import` in the repository at `gitDir` and returns the
 * new commit's id. `tmp` is a private directory for the marks file.
 * @throws GitFailure (fast-import refused: a non-fast-forward tip without `force`, a bad parent…), E_GIT_FAILED (no git)
 */
export async function fastImportCommit(gitDir: string, tmp: string, reader: GitExportReader, c: FastImportCommit): Promise<string> {
  const marks = join(tmp, 'marks');
  const args = ['fast-import', '--quiet', '--done', '--date-format=raw', `--export-marks=${marks}`, ...(c.force ? ['--force'] : [])];
  const git = spawnGit(args, { gitDir });
  git.done.catch(() => undefined); // awaited below; an early exit also ends the writes
  const out = git.stdin;
  const write = async (b: Buffer | string): Promise<void> => {
    if (!out.write(b)) await Promise.race([once(out, 'drain'), git.done]);
  };
  const ident = (role: string, i: GitIdent) => `${role} ${cleanIdent(i).name} <${cleanIdent(i).email}> ${c.timeS} +0000\n`;
  const msg = Buffer.from(c.message.endsWith('\n') ? c.message : `${c.message}\n`, 'utf8');
  try {
    await write(`commit ${c.ref}\nmark :1\n${ident('author', c.author)}${ident('committer', c.committer)}data ${msg.length}\n`);
    await write(msg);
    await write(`from ${c.parent}\n`);
    for (const p of c.deletes) await write(`D ${quotePath(p)}\n`);
    for (const w of c.writes) {
      if (w.entry.type === 'symlink') {
        const target = nameToBytes(w.entry.target);
        await write(`M 120000 inline ${quotePath(w.path)}\ndata ${target.length}\n`);
        await write(target);
      } else {
        await write(`M ${w.entry.mode & 0o111 ? '100755' : '100644'} inline ${quotePath(w.path)}\ndata ${w.entry.size}\n`);
        for await (const b of reader.readFile(w.entry)) await write(b);
      }
      await write('\n');
    }
    await write('\ndone\n');
  } finally {
    out.end();
  }
  await git.done;
  const line = (await readFile(marks, 'utf8')).split('\n').find((l) => l.startsWith(':1 '));
  if (!line) throw new GitFailure(args, 0, 'fast-import wrote no mark for the commit');
  return line.slice(3).trim();
}

/**
 * The author and committer of an export: the repository's git configuration (`author.*`,
 * `committer.*`, then `user.name` / `user.email`, every scope git reads), else AWC's
 * defaults `AWC <awc@localhost>`.
 */
export async function identities(gitDir: string): Promise<{ author: GitIdent; committer: GitIdent }> {
  const get = async (key: string): Promise<string | undefined> => {
    try {
      return (await runGit(['config', '--get', key], { gitDir })).stdout.trim() || undefined;
    } catch (err) {
      if (err instanceof GitFailure) return undefined; // not set
      throw err;
    }
  };
  const [un, ue, an, ae, cn, ce] = await Promise.all(
    ['user.name', 'user.email', 'author.name', 'author.email', 'committer.name', 'committer.email'].map(get),
  );
  return {
    author: cleanIdent({ name: an ?? un ?? '', email: ae ?? ue ?? '' }),
    committer: cleanIdent({ name: cn ?? un ?? '', email: ce ?? ue ?? '' }),
  };
}
