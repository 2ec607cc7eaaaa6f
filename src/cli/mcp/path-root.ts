import { lstat, readFile, realpath, stat } from 'node:fs/promises';
import { basename, dirname, isAbsolute, join, normalize, resolve } from 'node:path';
import { AwcError, toAwcError } from '../../core/errors.js';
import { openLocalRepo } from '../../service/git-run.js';

/** True when `path` is `dir` or below it (both absolute, normalised). */
function within(dir: string, path: string): boolean {
  return path === dir || path.startsWith(dir === '/' ? '/' : `${dir}/`);
}

/**
 * The directory an `awc mcp` server reads, writes, mounts and exports under
 * (docs/reference/mcp.md#root, docs/explanation/security.md "The MCP server's root and
 * scope"): every path a tool is given (`mountPath`, `path`, a git repository and its git
 * directories) must be at or below it once symbolic links are resolved, and never inside the
 * AWC home. Paths are checked when the tool runs, by resolving the nearest existing ancestor
 * with realpath; the tool then works on that resolved path (symlink-free up to the first
 * component that does not exist yet).
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
   * The path a tool works on for `path`: absolute, with no `..` component, and, once its
   * nearest existing ancestor is resolved (symbolic links followed), at or below the root and
   * outside the AWC home. `what` names the argument in messages.
   * @throws E_USAGE (not absolute), E_OUT_OF_SCOPE (details: path, root, resolved?)
   */
  async path(path: string, what: string): Promise<string> {
    if (!isAbsolute(path)) throw new AwcError('E_USAGE', `${what} must be an absolute path, got ${JSON.stringify(path)}`);
    if (path.split('/').includes('..')) throw this.outside(path, what, 'it names ".."');
    let existing = normalize(path);
    if (existing.length > 1 && existing.endsWith('/')) existing = existing.slice(0, -1);
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
    const full = join(real, ...rest);
    if (!within(this.dir, full)) throw this.outside(path, what, full === path ? undefined : `it resolves to ${full}`, full);
    const home = await realpath(this.home).catch(() => resolve(this.home));
    if (within(home, full) || within(full, home))
      throw new AwcError('E_OUT_OF_SCOPE', `${what} ${path} is the AWC home ${home} or holds it or is inside it`, {
        hint: "An MCP server never writes in AWC's own home; pass a path under its root outside the home.",
        details: { path, root: this.dir, home },
      });
    return full;
  }

  /**
   * A local git repository for `workspace_export` format git: its path (see {@link path}) and
   * its git directory and common directory (where objects and refs are written: a `.git` file
   * or a linked worktree may name them elsewhere) must all be under the root.
   * @throws E_USAGE, E_OUT_OF_SCOPE, E_GIT_NOT_A_REPO
   */
  async gitRepo(path: string): Promise<string> {
    const repo = await this.path(path, 'path');
    const { gitDir } = await openLocalRepo(repo);
    await this.path(gitDir, 'the git directory of path');
    const common = (await readFile(join(gitDir, 'commondir'), 'utf8').catch(() => undefined))?.trim();
    if (common) await this.path(resolve(gitDir, common), 'the common git directory of path');
    return repo;
  }

  private outside(path: string, what: string, why: string | undefined, resolved?: string): AwcError {
    return new AwcError('E_OUT_OF_SCOPE', `${what} ${path} is outside this MCP server's root ${this.dir}${why ? ` (${why})` : ''}`, {
      hint: `This server reads, writes, mounts and exports only under its root (\`awc mcp --root DIR\`, default the directory it was started in); pass a path under ${this.dir}.`,
      details: { path, root: this.dir, ...(resolved === undefined ? {} : { resolved }) },
    });
  }
}
