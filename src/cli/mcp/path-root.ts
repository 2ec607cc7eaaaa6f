import { readlinkSync } from 'node:fs';
import { lstat, readFile, realpath, stat } from 'node:fs/promises';
import { basename, dirname, isAbsolute, join, normalize, relative, resolve } from 'node:path';
import { DirFd } from '../../core/dir-fd.js';
import { within } from '../../core/path-within.js';
import { AwcError, toAwcError } from '../../core/errors.js';
import { openLocalRepo } from '../../service/git/git-run.js';

/**
 * The directory an `awc mcp` server reads, writes, mounts and exports under
 * (docs/reference/mcp.md#root, docs/explanation/security.md "The MCP server's root and
 * scope"): every path a tool is given (`mountPath`, `path`, a git repository and its git
 * directories) must be at or below it once symbolic links are resolved, and never inside the
 * AWC home. Paths are checked when the tool runs, by a walk from the root's directory
 * descriptor without following symbolic links (see {@link McpRoot.pin}); an export then
 * writes through the descriptor the walk opened ({@link McpRoot.use}).
 */
export class McpRoot {
  private constructor(
    /** The root's real path. */
    readonly dir: string,
    private readonly home: string,
  ) {}

  /**
   * The root of a server: `dir` (`--root`) or, without one, the directory the server was
   * started in. Without `--root`, a start in `/` is refused: a client that starts its servers
   * there would otherwise give the agent the whole host.
   * @throws E_USAGE (not a directory, missing, or the default in `/`)
   */
  static async open(dir: string | undefined, home: string): Promise<McpRoot> {
    const given = resolve(dir ?? process.cwd());
    const real = await realpath(given).catch(() => undefined);
    const st = real === undefined ? undefined : await stat(real).catch(() => undefined);
    if (real === undefined || !st?.isDirectory())
      throw new AwcError('E_USAGE', `--root ${given} is not a directory`, {
        hint: 'Pass --root with the directory the agent may work under (its project).',
        details: { root: given },
      });
    if (dir === undefined && real === '/')
      throw new AwcError('E_USAGE', 'awc mcp was started in / without --root: it would read and write anywhere on the host', {
        hint: "Pass --root DIR in the client's server entry (the project directory), or --root / to lift the confinement on purpose.",
      });
    return new McpRoot(real, home);
  }

  /**
   * The path a tool works on for `path`: absolute, with no `..` component, and at or below the
   * root and outside the AWC home, as a walk finds it (see {@link pin}). `what` names the
   * argument in messages. For a mount (its path is recorded): the walk's canonical path.
   * @throws E_USAGE (not absolute), E_OUT_OF_SCOPE (details: path, root, resolved?)
   */
  async path(path: string, what: string): Promise<string> {
    const pinned = await this.pin(path, what, { named: true });
    pinned.close();
    return pinned.path;
  }

  /**
   * Runs `fn` on `path` through the directory the check opened: `fn` gets `via`, the path
   * `/proc/<pid>/fd/<n>/<rest>` of the deepest existing directory of `path` (opened by
   * {@link pin}) and the components that do not exist yet, so what `fn` opens or creates is
   * in the directory that was checked, whatever is renamed or swapped for a symbolic link
   * meanwhile (this process and the children it runs, git, may use it). An AwcError's message
   * names `path`'s canonical form, never `via`. Only the last component may be missing (a
   * name the kernel resolves inside the checked directory); with `parents`, missing
   * directories above it are created first through the descriptors (mkdir, then opened
   * without following), else a missing parent is E_USAGE.
   * @throws what {@link pin} throws, E_USAGE (a missing parent without `parents`), and what `fn` throws
   */
  async use<T>(
    path: string,
    what: string,
    fn: (via: string, canonical: string) => Promise<T>,
    opts: { parents?: boolean } = {},
  ): Promise<T> {
    const pinned = await this.pin(path, what, opts);
    try {
      return await fn(pinned.via, pinned.path);
    } catch (err) {
      if (!(err instanceof AwcError) || !err.message.includes(pinned.via)) throw err;
      throw new AwcError(err.code, err.message.split(pinned.via).join(pinned.path), { hint: err.hint, details: err.details, cause: err });
    } finally {
      pinned.close();
    }
  }

  /**
   * Runs `fn` on a directory under the root that something else reads by name (the import of
   * `prepare`, which opens its source itself and records its path): the walk ({@link pin}) must
   * open `path` itself as a directory; then, before and after `fn`, the canonical path must
   * still be that very directory (same device and inode as the descriptor the walk holds open,
   * and no symbolic link on it: its realpath is itself). A change after `fn` ran is a swap under
   * the read: `undo` gets what `fn` returned (to drop it) and the call fails.
   * @throws what {@link pin} throws, E_SOURCE_NOT_FOUND (missing), E_USAGE (not a directory),
   *   E_PATH_TRAVERSAL (the directory was swapped before or while `fn` read it), and what `fn` throws
   */
  async directory<T>(path: string, what: string, fn: (dir: string) => Promise<T>, undo: (result: T) => Promise<void>): Promise<T> {
    const pinned = await this.pin(path, what, { named: true });
    try {
      if (!/^\/proc\/\d+\/fd\/\d+$/.test(pinned.via)) {
        // the walk stopped before the end: the last component is missing or not a directory
        const st = await lstat(pinned.path).catch(() => undefined);
        if (st === undefined) throw new AwcError('E_SOURCE_NOT_FOUND', `no such directory: ${pinned.path}`, { details: { path } });
        throw new AwcError('E_USAGE', `${what} ${pinned.path} is not a directory`, {
          hint: `Pass a directory as ${what}, not a file in it.`,
          details: { path },
        });
      }
      await this.stillSame(pinned, path, what);
      const result = await fn(pinned.path);
      try {
        await this.stillSame(pinned, path, what);
      } catch (err) {
        await undo(result);
        throw err;
      }
      return result;
    } finally {
      pinned.close();
    }
  }

  /** Whether the canonical path of a pin still names the directory its descriptor holds, with no symbolic link on it. @throws E_PATH_TRAVERSAL */
  private async stillSame(pinned: { path: string; via: string }, path: string, what: string): Promise<void> {
    const [held, named, real] = await Promise.all([
      stat(pinned.via).catch(() => undefined),
      lstat(pinned.path).catch(() => undefined),
      realpath(pinned.path).catch(() => undefined),
    ]);
    if (held && named?.isDirectory() && held.dev === named.dev && held.ino === named.ino && real === pinned.path) return;
    throw new AwcError(
      'E_PATH_TRAVERSAL',
      `${what} ${path} changed while it was read: ${pinned.path} is no longer the directory that was checked`,
      {
        hint: 'Something renamed it or swapped a symbolic link into it; nothing was kept. Call the tool again once the directory stays put.',
        details: { path, root: this.dir },
      },
    );
  }

  /**
   * Checks `path` by walking it from the root's directory descriptor, one component at a time
   * with O_NOFOLLOW (DirFd, src/core/dir-fd.ts): a directory is opened through its parent's
   * descriptor (a symbolic link swapped in between the lstat and the open is refused), a
   * symbolic link is read and its target walked in its place only while it stays under the
   * root (an absolute target is walked from the root, `..` never above it; at most 40 links),
   * and the walk stops at the first component that does not exist. A path that is not under
   * the root as written (a link outside the root that leads into it) is first resolved with
   * realpath, then walked the same way. The descriptor of the deepest existing directory stays
   * open until `close()`. Unless `named` (a path only named, as a mount's), missing directories
   * above the last component are created (`parents`) or refused (E_USAGE): see {@link use}.
   * @returns `path`: the canonical path (symbolic links resolved), `via`: the same path through
   *   the open descriptor (`/proc/<pid>/fd/<n>/<rest>`), `close`
   * @throws E_USAGE (not absolute), E_OUT_OF_SCOPE (details: path, root, resolved?), E_PATH_TRAVERSAL (a swap seen during the walk)
   */
  async pin(
    path: string,
    what: string,
    opts: { parents?: boolean; named?: boolean } = {},
  ): Promise<{ path: string; via: string; close(): void }> {
    if (!isAbsolute(path)) throw new AwcError('E_USAGE', `${what} must be an absolute path, got ${JSON.stringify(path)}`);
    if (path.split('/').includes('..')) throw this.outside(path, what, 'it names ".."');
    let start = normalize(path);
    if (start.length > 1 && start.endsWith('/')) start = start.slice(0, -1);
    if (!within(this.dir, start)) {
      const full = await this.resolveOutside(start, path, what);
      if (!within(this.dir, full)) throw this.outside(path, what, full === path ? undefined : `it resolves to ${full}`, full);
      start = full;
    }
    const walked = this.walk(start, path, what);
    try {
      const full = join(this.dir, ...walked.names, ...walked.rest);
      const home = await realpath(this.home).catch(() => resolve(this.home));
      if (within(home, full) || within(full, home))
        throw new AwcError('E_OUT_OF_SCOPE', `${what} ${path} is the AWC home ${home} or holds it or is inside it`, {
          hint: "An MCP server never writes in AWC's own home; pass a path under its root outside the home.",
          details: { path, root: this.dir, home },
        });
      while (!opts.named && walked.rest.length > 1) {
        const parent = join(this.dir, ...walked.names, walked.rest[0]!);
        if (!opts.parents)
          throw new AwcError('E_USAGE', `the directory ${parent} does not exist`, {
            hint: 'Export into an existing directory: create it first (mkdir -p), or name a file in one.',
          });
        const name = walked.rest.shift()!;
        const cur = walked.stack[walked.stack.length - 1]!;
        try {
          walked.stack.push(cur.mkdirOpen(name, 0o755));
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw toAwcError(err);
          walked.stack.push(cur.openRel(name)); // made meanwhile: a directory, never a symbolic link
        }
        walked.names.push(name);
      }
      const top = walked.stack[walked.stack.length - 1]!;
      const via = [`/proc/${process.pid}/fd/${top.fd}`, ...walked.rest].join('/');
      return { path: full, via, close: () => walked.stack.forEach((d) => d.close()) };
    } catch (err) {
      walked.stack.forEach((d) => d.close());
      throw err;
    }
  }

  /** The real path of a path not under the root as written: its nearest existing ancestor's realpath and the rest. */
  private async resolveOutside(start: string, path: string, what: string): Promise<string> {
    let existing = start;
    const rest: string[] = [];
    for (;;) {
      try {
        await lstat(existing);
        break;
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code !== 'ENOENT' && code !== 'ENOTDIR') throw toAwcError(err);
        rest.unshift(basename(existing));
        existing = dirname(existing);
      }
    }
    const real = await realpath(existing).catch(() => undefined);
    if (real === undefined) throw this.outside(path, what, `${existing} is a symbolic link that leads nowhere`);
    return join(real, ...rest);
  }

  /** The descriptor walk of {@link pin} from the root to `start` (under the root): the open directories, their names below the root, and the missing rest. */
  private walk(start: string, path: string, what: string): { stack: DirFd[]; names: string[]; rest: string[] } {
    const opened = DirFd.openRoot(this.dir);
    if (!opened) throw this.outside(path, what, `the root ${this.dir} is gone`);
    const stack = [opened.dir];
    const names: string[] = [];
    let todo = relative(this.dir, start)
      .split('/')
      .filter((n) => n !== '' && n !== '.');
    let links = 0;
    try {
      while (todo.length > 0) {
        const name = todo.shift()!;
        if (name === '.') continue;
        if (name === '..') {
          if (stack.length === 1) throw this.outside(path, what, 'a symbolic link in it leads above the root');
          stack.pop()!.close();
          names.pop();
          continue;
        }
        const cur = stack[stack.length - 1]!;
        const st = cur.lstat(name);
        if (st?.isSymbolicLink()) {
          if (++links > 40) throw this.outside(path, what, 'too many symbolic links');
          const target = readlinkSync(cur.path(name), 'utf8');
          const here = join(this.dir, ...names);
          const to = normalize(isAbsolute(target) ? target : join(here, target));
          if (!within(this.dir, to)) throw this.outside(path, what, `it resolves to ${join(to, ...todo)}`, join(to, ...todo));
          while (stack.length > 1) stack.pop()!.close();
          names.length = 0;
          todo = [
            ...relative(this.dir, to)
              .split('/')
              .filter((n) => n !== '' && n !== '.'),
            ...todo,
          ];
          continue;
        }
        if (st?.isDirectory()) {
          stack.push(cur.openRel(name));
          names.push(name);
          continue;
        }
        // missing, or not a directory (a file the tool refuses or replaces): the rest is named, not walked
        const rest = [name, ...todo];
        if (rest.includes('..')) throw this.outside(path, what, 'a symbolic link in it names ".." below a missing directory');
        return { stack, names, rest };
      }
      return { stack, names, rest: [] };
    } catch (err) {
      stack.forEach((d) => d.close());
      throw err;
    }
  }

  /**
   * Runs `fn` on a local git repository for `workspace_export` format git (see {@link use}):
   * its path, and its git directory and common directory (where objects and refs are written:
   * a `.git` file or a linked worktree may name them elsewhere), must all be under the root.
   * @throws E_USAGE, E_OUT_OF_SCOPE, E_GIT_NOT_A_REPO, and what `fn` throws
   */
  async gitRepo<T>(path: string, fn: (via: string, canonical: string) => Promise<T>): Promise<T> {
    return this.use(path, 'path', async (via, repo) => {
      const { gitDir } = await openLocalRepo(repo);
      await this.path(gitDir, 'the git directory of path');
      const common = (await readFile(join(gitDir, 'commondir'), 'utf8').catch(() => undefined))?.trim();
      if (common) await this.path(resolve(gitDir, common), 'the common git directory of path');
      return fn(via, repo);
    });
  }

  private outside(path: string, what: string, why: string | undefined, resolved?: string): AwcError {
    return new AwcError('E_OUT_OF_SCOPE', `${what} ${path} is outside this MCP server's root ${this.dir}${why ? ` (${why})` : ''}`, {
      hint: `This server reads, writes, mounts, prepares and exports only under its root ${this.dir} (the directory it was started with); pass a path under it.`,
      details: { path, root: this.dir, ...(resolved === undefined ? {} : { resolved }) },
    });
  }
}
