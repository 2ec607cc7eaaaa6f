import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import { resolve } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { AwcError, toAwcError } from '../../core/errors.js';
import { UserClient } from '../../daemon/users/user-client.js';
import type { ImportResult } from '../../service/workspace/awc.js';
import type { ExportOptions, ExportResult } from '../../service/workspace/awc-api.js';
import type { ImportOptions } from '../../service/import/import-snapshot.js';
import type { GitImportOptions } from '../../service/git/git-import.js';
import type { CheckpointGitOptions, GitExportOptions } from '../../service/git/git-export.js';
import type { RemoteAwc, RemoteImportOptions } from './remote-api.js';
import { checkpointGitAsUser, exportGitAsUser, importGitAsUser, type GitCalls } from './remote-git.js';
import { extractTarToDir } from '../../service/tar/extract-tar-dir.js';
import { PendingFile } from '../../service/tar/pending-file.js';
import { checkTarTarget } from '../../service/tar/export-tar.js';
import { withSourcePath } from '../../service/refs/run-target.js';
import { restoreKeptSet } from '../../service/kept/kept-files.js';
import { relinkReleasedWorktree } from '../../service/workspace/idle.js';
import type { WorkspaceRow } from '../../catalog/port/catalog.js';
import type { MountOptions, MountResult } from '../../drivers/port/mount-driver.js';
import type { KeptSetBytes } from '../../daemon/users/user-methods.js';
import type { AttachResult, DetachResult } from '../../service/attach/attach.js';

/**
 * The service facade of an ordinary user's CLI over the per-user socket `socket`: every method
 * of {@link RemoteAwc} is one call of the daemon's call table (src/daemon/users/user-methods.ts)
 * or one of its endpoints; what lives in root's home (the catalog, the store, gc) is not here.
 */
export function remoteAwc(socket: string, namespace: string): RemoteAwc {
  const client = new UserClient(socket);
  // typed by the member it fills in (its arguments and result as RemoteAwc declares them): the
  // daemon's answer is that method's result, checked by the same schema on its side; paths are
  // the caller's: relative ones are resolved here, in the caller's directory, never in the daemon's
  const rpc =
    <A extends unknown[], R>(method: string) =>
    (...args: A): Promise<R> =>
      client.call(namespace, method, absolutePaths(method, args)) as Promise<R>;
  // git runs in this process, as the user; these are what it needs of the daemon (src/cli/remote/remote-git.ts)
  const git: GitCalls = {
    resolve: rpc('resolve'),
    getSnapshot: rpc('getSnapshot'),
    getWorkspace: rpc('getWorkspace'),
    checkpoint: rpc('checkpoint'),
    importDir: (dir: string, o: ImportOptions) => importAsUser(client, namespace, dir, o),
  };
  return {
    namespace,
    close: async () => undefined,
    listSnapshots: rpc('listSnapshots'),
    listWorkspaces: rpc('listWorkspaces'),
    getSnapshot: rpc('getSnapshot'),
    getWorkspace: rpc('getWorkspace'),
    resolve: rpc('resolve'),
    setLabels: rpc('setLabels'),
    fork: rpc('fork'),
    mount: async (ref: string, dir: string, o?: MountOptions): Promise<MountResult> => {
      // the row before the mount: its release labels go once mounted
      const ws = (await client.call(namespace, 'getWorkspace', [ref])) as Pick<WorkspaceRow, 'labels'>;
      const r = (await rpc('mount')(ref, dir, o)) as MountResult;
      // as the user: a released hook worktree is linked to its registration again (Awc.mount does it for its own caller)
      await relinkReleasedWorktree(ws, resolve(dir));
      return r;
    },
    unmount: rpc('unmount'),
    checkpoint: rpc('checkpoint'),
    diff: rpc('diff'),
    rm: rpc('rm'),
    doctor: rpc('doctor'),
    leases: { list: rpc('leases.list'), show: rpc('leases.show') },
    usage: rpc('usage'),
    status: rpc('status'),
    kept: {
      ls: rpc('kept.ls'),
      rm: rpc('kept.rm'),
      restore: async (ref: string, dir: string) => {
        const { set, contents } = (await client.call(namespace, 'kept.read', [ref])) as KeptSetBytes;
        // as the user, into a directory of theirs: each file created exclusively, 0600
        const bytes = new Map(set.files.map((f, i) => [f.path, Buffer.from(contents[i] ?? '', 'base64')]));
        return restoreKeptSet(set, resolve(dir), (f, dest) => fs.writeFileSync(dest, bytes.get(f.path)!, { flag: 'wx', mode: 0o600 }));
      },
    },
    importSnapshot: (source: string, opts: RemoteImportOptions = {}) => importAsUser(client, namespace, source, opts),
    userStatus: () => client.status(),
    // the worktree's real path and environment key found as the user; the daemon checks the rest as theirs
    attach: async (dir: string, opts: { snapshot?: string } = {}) => {
      const real = realOr(dir);
      if (!fs.statSync(real, { throwIfNoEntry: false })?.isDirectory())
        throw new AwcError('E_SOURCE_NOT_FOUND', `no such directory: ${dir}`);
      const { envKey } = await import('../../service/attach/env-key.js');
      return (await client.call(namespace, 'attach', [real, { snapshot: opts.snapshot, key: await envKey(real) }])) as AttachResult;
    },
    detach: async (dir: string, opts: { force?: boolean } = {}) =>
      (await client.call(namespace, 'detach', [realOr(dir), { force: opts.force === true }])) as DetachResult,
    importGit: (repo: string, opts: GitImportOptions = {}) => importGitAsUser(git, repo, opts),
    exportGit: (ref: string, opts: GitExportOptions) => exportGitAsUser(client, namespace, git, ref, opts),
    checkpointGit: (ws: string, opts: CheckpointGitOptions) => checkpointGitAsUser(client, namespace, git, ws, opts),
    export: (ref: string, opts: ExportOptions) => exportAsUser(client, namespace, ref, opts),
  };
}

/** The real path of `dir`, or its absolute path when it is gone (a detach of a removed worktree). */
function realOr(dir: string): string {
  try {
    return fs.realpathSync(dir);
  } catch {
    return resolve(dir);
  }
}

/** Methods whose first argument is a workspace reference or, with a `/` in it or `.`, a mount path (Awc.unmount's rule). */
const REF_OR_PATH = new Set(['unmount']);

/** `args` of `method` with the mount paths among them made absolute against this process's directory. */
function absolutePaths(method: string, args: unknown[]): unknown[] {
  const out = [...args];
  const isPath = (a: unknown): a is string => typeof a === 'string' && (a.includes('/') || a === '.');
  if (method === 'mount' && typeof out[1] === 'string') out[1] = resolve(out[1]);
  if (REF_OR_PATH.has(method) && isPath(out[0])) out[0] = resolve(out[0]);
  return out;
}

/**
 * Runs `tar` as this user; resolves when it exited 0. `onMember`: called for each line of a
 * verbose listing on stderr (`-v`; a line that starts `tar: ` is a message, kept for the error).
 * @throws E_PERMISSION (a file this user cannot read), E_IO
 */
function runTar(args: string[], onMember?: () => void): { child: ReturnType<typeof spawn>; done: Promise<void> } {
  const child = spawn('tar', args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  let line = '';
  child.stderr!.setEncoding('utf8').on('data', (d: string) => {
    if (!onMember) return void (err += d);
    const lines = (line + d).split('\n');
    line = lines.pop()!;
    for (const l of lines) {
      if (l.startsWith('tar: ')) err += `${l}\n`;
      else onMember();
    }
  });
  const done = new Promise<void>((ok, fail) => {
    child.on('error', (e) => fail(toAwcError(e)));
    child.on('close', (code) => {
      if (line.startsWith('tar: ')) err += line;
      if (code === 0) return ok();
      const why = err.trim().split('\n')[0] ?? `exit ${code}`;
      if (/File name too long/i.test(err))
        return fail(
          new AwcError('E_NAME_TOO_LONG', `tar failed: a path is longer than the system allows (4096 bytes): ${why.slice(0, 300)}…`, {
            hint: 'Shorten the path.',
          }),
        );
      fail(new AwcError(/Permission denied/i.test(err) ? 'E_PERMISSION' : 'E_IO', `tar failed: ${why}`));
    });
  });
  return { child, done };
}

/**
 * `snapshot import` as the user: this process reads `source` (a directory through GNU tar, or
 * a tar file) and streams it to the daemon, with the name, message and labels; `exclude`d
 * paths of a directory are never read; `onProgress` counts the members tar read and the bytes sent.
 */
async function importAsUser(client: UserClient, namespace: string, source: string, opts: RemoteImportOptions): Promise<ImportResult> {
  const path = resolve(source);
  const st = fs.statSync(path, { throwIfNoEntry: false });
  if (!st) throw new AwcError('E_SOURCE_NOT_FOUND', `no such directory or tar file: ${source}`);
  const labels = withSourcePath(opts.labels, st.isDirectory() && opts.recordPath !== false ? path : undefined);
  // the message root's import records (`import <path>`), with this user's path, never the daemon's temporary file
  const args = { namespace, name: opts.name, message: opts.message ?? `import ${path}`, labels };
  if (!st.isDirectory()) {
    const input = fs.createReadStream(path);
    const done = new Promise<void>((ok, fail) => input.once('end', ok).once('error', (e) => fail(toAwcError(e))));
    return (await client.upload(args, input, done)) as ImportResult;
  }
  try {
    fs.readdirSync(path); // as the user: a directory they cannot read fails here, as it would for them
  } catch (err) {
    throw toAwcError(err);
  }
  // exact member names (`./a/b`): anchored, no wildcards; before the member, as GNU tar wants
  const exclude = (opts.exclude ?? []).flatMap((rel) => ['--anchored', '--no-wildcards', `--exclude=./${rel}`]);
  const progress = { files: 0, bytes: 0 };
  const verbose = opts.onProgress ? ['-v'] : [];
  const onMember = opts.onProgress
    ? () => {
        progress.files++;
        opts.onProgress!(progress);
      }
    : undefined;
  // --sparse: a sparse file goes as its data only (GNU sparse 1.0 members; tar finds the holes with SEEK_DATA)
  const tar = runTar(
    ['--format=pax', '--sparse', '--sparse-version=1.0', '--numeric-owner', ...verbose, ...exclude, '-C', path, '-cf', '-', '.'],
    onMember,
  );
  if (opts.onProgress) tar.child.stdout!.on('data', (b: Buffer) => (progress.bytes += b.length));
  return (await client.upload(args, tar.child.stdout!, tar.done)) as ImportResult;
}

/** `export` as the user: the daemon streams the tar; this process writes the file, or extracts it (export-dir rules). */
async function exportAsUser(client: UserClient, namespace: string, ref: string, opts: ExportOptions): Promise<ExportResult> {
  if ((opts.tar === undefined) === (opts.dir === undefined))
    throw new AwcError('E_USAGE', 'export needs exactly one of --tar FILE or --dir DIR');
  const result = (res: { trailers: NodeJS.Dict<string> }): ExportResult => {
    const r = res.trailers['x-awc-result'];
    if (!r) throw new AwcError('E_IO', 'the daemon ended the export early');
    return JSON.parse(r) as ExportResult;
  };
  if (opts.tar === '-') {
    const res = await client.exportTar(namespace, ref);
    await pipeline(res, process.stdout, { end: false });
    return result(res);
  }
  if (opts.tar !== undefined) {
    await checkTarTarget(resolve(opts.tar)); // as root's export does: E_USAGE for a missing directory, E_TARGET_EXISTS
    const file = await PendingFile.create(resolve(opts.tar));
    try {
      const res = await client.exportTar(namespace, ref);
      await pipeline(res, file.stream());
      const r = result(res);
      await file.commit();
      return r;
    } catch (err) {
      await file.abort();
      throw toAwcError(err);
    }
  }
  let res: Awaited<ReturnType<UserClient['exportTar']>> | undefined;
  let r: ExportResult | undefined;
  // as the user, through descriptors (src/service/tar/extract-tar.ts): owners are this user's, setuid/setgid bits cleared unless kept
  const { leftOut } = await extractTarToDir(async () => (res = await client.exportTar(namespace, ref)), opts.dir!, {
    overwrite: opts.overwrite === true,
    keepPrivileges: opts.keepPrivileges === true,
    verify: () => void (r = result(res!)),
  });
  return leftOut.length > 0 ? { ...r!, leftOut } : r!;
}
