import * as fs from 'node:fs';
import { randomBytes } from 'node:crypto';
import { link, open, symlink, type FileHandle } from 'node:fs/promises';
import type * as TarStream from 'tar-stream';
import type * as Xattr from 'fs-xattr';
import { DirFd, fdPath } from '../../core/dir-fd.js';
import { AwcError, toAwcError } from '../../core/errors.js';
import { lazyRequire } from '../../core/lazy-require.js';
import { fsPath, hasEscape, nameFromBytes } from '../../core/raw-name.js';
import { checkName } from '../../core/tree.js';
import { runWithDir } from '../../host/tree/export-times.js';
import { exactTimesSupported, futimesNs, microSeconds, utimesNsAt } from '../../host/sys/utimens.js';
import { writeDense, writeExtents } from '../../host/tree/write-content.js';
import { paxTimeToNs } from './import-tar.js';
import { rawPaxReader } from './pax-raw.js';
import { readSparseMap, sparseMember } from './tar-sparse.js';

/** tar-stream and fs-xattr, loaded on first use. */
const tarStream = lazyRequire<typeof TarStream>('tar-stream');
const xattr = lazyRequire<typeof Xattr>('fs-xattr');

/**
 * Extracting a tar stream (the daemon's export of a snapshot, src/service/tar/export-tar.ts) into
 * a directory as the ordinary user who runs this process: `export <ref> --dir DIR` through
 * the daemon (src/cli/remote/remote-awc.ts). It replaces GNU tar there, which names each member by
 * its whole path and so cannot write below 4096 bytes of path (docs/decisions.md "Paths
 * longer than PATH_MAX").
 *
 * Everything is written relative to directory descriptors (src/core/dir-fd.ts): each
 * member's parent is opened from the top, one component at a time with
 * O_PATH|O_DIRECTORY|O_NOFOLLOW (the last parent stays open for the next member), files are
 * created with O_CREAT|O_EXCL|O_NOFOLLOW, directories with mkdir, links with symlink/link,
 * none of which follows or replaces an existing name. A name that is absolute or holds `..`,
 * a member below a symlink member, and a hardlink whose target is such a path are
 * E_PATH_TRAVERSAL; so a hostile stream never writes outside the top directory.
 *
 * What a member becomes (the rules of GNU tar `-x --no-same-owner --no-same-permissions
 * --delay-directory-restore` as an ordinary user, which this replaces):
 * - owner: the user (no chown);
 * - permission bits: the member's `& 0777 & ~umask`; the setuid/setgid bits of
 *   non-directories are cleared (each listed in `leftOut` as `setuid/setgid bit cleared`)
 *   unless `keepPrivileges`; sticky bits and the setgid bit of directories are kept;
 * - directories: made 0700, their mode and modification time set after the whole stream
 *   (children before parents), as with `--delay-directory-restore`;
 * - regular files: content streamed to disk (never held whole), mode, nanosecond mtime;
 * - symlinks: the target verbatim (raw bytes), mtime with utimensat(AT_SYMLINK_NOFOLLOW);
 * - hardlinks: `link(2)` to an earlier member (never following a symlink);
 * - fifos: `mkfifo` on the parent's descriptor (the tool gets it as fd 3);
 * - device nodes: E_PERMISSION (an ordinary user cannot make them; GNU tar failed too);
 * - xattrs: `user.*` ones are set (on files and directories; Linux allows no others
 *   to an ordinary user there), the others are not, as GNU tar without `--xattrs` set none;
 *   on a file system without user xattrs they are listed in `leftOut` (`LEFT_OUT_USER_XATTRS`);
 * - times: nanoseconds where utimensat loads through koffi (src/host/sys/utimens.ts), else µs.
 * - file data as root's export --dir writes it (src/host/tree/write-content.ts): a GNU sparse 1.0
 *   member (src/service/tar/tar-sparse.ts; its real name in `GNU.sparse.name`) gets its data
 *   ranges written and its holes left unallocated; a dense file's zero blocks are left as
 *   holes only in runs under 1 MiB. GNU sparse 0.x members are E_UNSUPPORTED.
 */

/** Options of {@link extractTar}. */
export interface ExtractTarOptions {
  /** Keep setuid/setgid bits of non-directories (default: clear them and list them in `leftOut`). */
  keepPrivileges?: boolean;
  /** The umask applied to every mode (default: this process's). */
  umask?: number;
}

/** What {@link extractTar} left out (slash path from the top, reason), in stream order. */
export interface ExtractTarResult {
  leftOut: { path: string; reason: string }[];
}

/** The reason given in `leftOut` for a cleared setuid/setgid bit. */
export const LEFT_OUT_CLEARED = 'setuid/setgid bit cleared';
/** The reason given in `leftOut` for user xattrs the target file system does not support. */
export const LEFT_OUT_USER_XATTRS = 'user.* xattrs not materialised (the file system does not support them)';

/** The header of one member as tar-stream gives it, plus its raw pax records (key → bytes). */
export interface Member {
  header: TarStream.Header;
  pax: Map<string, Buffer>;
  /** The member's slash path (escaped raw bytes, src/core/raw-name.ts) as the archive names it. */
  name: string;
}

/**
 * Writes the data of a regular-file member, read from `data` (the member's bytes in the
 * archive), into `fh` (a new empty file open for writing). @returns the file's size in bytes.
 * @throws AwcError E_FORMAT (the data does not match the header), errno errors
 */
export type MemberDataWriter = (fh: FileHandle, data: AsyncIterable<Buffer>, m: Member) => Promise<number>;

/** The plain writer: the data as it is, streamed (a member's size must match its header). */
export const writePlainData: MemberDataWriter = async (fh, data, m) => {
  const size = m.header.size ?? 0;
  const pos = await writeDense(fh, data);
  if (pos !== size) throw new AwcError('E_FORMAT', `tar member ${JSON.stringify(m.name)} is truncated`);
  await fh.truncate(size); // a file that ends in skipped zero blocks
  return pos;
};

/**
 * The writer of a GNU sparse 1.0 member of `size` logical bytes: reads its map, writes each
 * data range at its offset, leaves the holes unallocated.
 */
function sparseDataWriter(size: number): MemberDataWriter {
  return async (fh, data, m) => {
    const { ranges, data: rest } = await readSparseMap(data, m.header.size ?? 0, size, m.name);
    if ((await writeExtents(fh, rest, ranges, size)) !== size)
      throw new AwcError('E_FORMAT', `tar member ${JSON.stringify(m.name)}: its data does not fill its sparse map`);
    await fh.truncate(size);
    return size;
  };
}

/**
 * The writer of a member's data (used when it is a regular file) and the member's real name
 * (a GNU sparse 1.0 member keeps it in `GNU.sparse.name`; its header name is
 * `…/GNUSparseFile.0/…`). @throws AwcError E_UNSUPPORTED (GNU sparse 0.x), E_FORMAT (a bad realsize)
 */
function dataWriterFor(pax: Map<string, Buffer>, shownName: string): { write: MemberDataWriter; realName?: Buffer } {
  const sparse = sparseMember(pax, shownName);
  if (!sparse) return { write: writePlainData };
  return { write: sparseDataWriter(sparse.size), realName: sparse.name };
}

/** This process's umask, read without changing it (/proc/self/status); 022 where it cannot be read. */
export function currentUmask(): number {
  try {
    const m = /^Umask:\s*([0-7]+)$/m.exec(fs.readFileSync('/proc/self/status', 'utf8'));
    if (m) return parseInt(m[1]!, 8);
  } catch {
    // no /proc: the common default
  }
  return 0o022;
}

/** Splits a member name into checked components ([] is the top). @throws E_PATH_TRAVERSAL (absolute, `..`) */
function splitName(name: string): string[] {
  if (name.startsWith('/')) throw new AwcError('E_PATH_TRAVERSAL', `tar member has an absolute name: ${JSON.stringify(name)}`);
  const parts = name.split('/').filter((p) => p !== '' && p !== '.');
  for (const p of parts) {
    if (p === '..') throw new AwcError('E_PATH_TRAVERSAL', `tar member name leaves the directory: ${JSON.stringify(name)}`);
    checkName(p, true);
  }
  return parts;
}

/** Opens parent directories below `top` through descriptors, keeping the last one open. */
class Parents {
  private cur: { key: string; dir: DirFd } | undefined;

  constructor(private readonly top: DirFd) {}

  /**
   * The directory `parts` (components below the top), opened one component at a time with
   * O_NOFOLLOW; valid until the next call. `what` names the member in errors.
   * @throws AwcError E_PATH_TRAVERSAL (a component is a symlink), E_FORMAT (missing, or not a directory)
   */
  open(parts: string[], what: string): DirFd {
    if (parts.length === 0) return this.top;
    const key = parts.join('/');
    if (this.cur?.key === key) return this.cur.dir;
    const below = this.cur && key.startsWith(`${this.cur.key}/`);
    const base = below ? this.cur!.dir : this.top;
    let d = base;
    try {
      for (let i = below ? this.cur!.key.split('/').length : 0; i < parts.length; i++) {
        const next = step(d, parts[i]!, what);
        if (d !== base) d.close();
        d = next;
      }
    } catch (err) {
      if (d !== base) d.close();
      throw err;
    }
    this.cur?.dir.close();
    this.cur = { key, dir: d };
    return d;
  }

  /** Closes the directory kept open. */
  close(): void {
    this.cur?.dir.close();
    this.cur = undefined;
  }
}

/** Opens the subdirectory `p` of `d` (O_PATH, O_NOFOLLOW); says why when it is not one. */
function step(d: DirFd, p: string, what: string): DirFd {
  try {
    return d.openRel(p);
  } catch (err) {
    if (!(err instanceof AwcError) || err.code !== 'E_PATH_TRAVERSAL') throw err;
    const st = d.lstat(p);
    if (st?.isSymbolicLink())
      throw new AwcError('E_PATH_TRAVERSAL', `tar member ${JSON.stringify(what)} lies under the symlink ${d.childRel(p)}`);
    throw new AwcError(
      'E_FORMAT',
      st
        ? `tar member ${JSON.stringify(what)} lies under ${d.childRel(p)}, which is not a directory`
        : `tar member ${JSON.stringify(what)} comes before its directory ${d.childRel(p)}`,
    );
  }
}

/** Maps a creation failure of `name` in `d`: an existing name is E_FORMAT (a member given twice) or, as a symlink, E_PATH_TRAVERSAL. */
function createError(d: DirFd, name: string, err: unknown): AwcError {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'EEXIST' || code === 'ELOOP') {
    const rel = d.childRel(name);
    if (d.lstat(name)?.isSymbolicLink()) return new AwcError('E_PATH_TRAVERSAL', `refusing to write through the symlink ${rel}`);
    return new AwcError('E_FORMAT', `tar member ${JSON.stringify(rel)} is given twice`);
  }
  return toAwcError(err);
}

/** The `user.*` xattrs of a member (raw pax `SCHILY.xattr.*`, or bsdtar's `LIBARCHIVE.xattr.*`): name → value. */
function userXattrs(pax: Map<string, Buffer>): Map<string, Buffer> {
  const out = new Map<string, Buffer>();
  for (const [key, value] of pax) {
    if (key.startsWith('SCHILY.xattr.user.')) out.set(key.slice('SCHILY.xattr.'.length), value);
    else if (key.startsWith('LIBARCHIVE.xattr.')) {
      const name = decodeURIComponent(key.slice('LIBARCHIVE.xattr.'.length));
      if (name.startsWith('user.') && !out.has(name)) out.set(name, Buffer.from(value.toString('latin1'), 'base64'));
    }
  }
  return out;
}

/**
 * Sets `xs` on the object at `objPath` (a descriptor path). @returns false when the file
 * system supports no user xattrs (ENOTSUP: GNU tar, which set none, succeeded there; the
 * caller lists them in `leftOut`), else true.
 */
function setXattrs(objPath: string, xs: Map<string, Buffer>): boolean {
  for (const [name, value] of xs) {
    try {
      xattr().setAttributeSync(objPath, name, value);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOTSUP' || code === 'EOPNOTSUPP') return false;
      throw toAwcError(err);
    }
  }
  return true;
}

/** Sets the times of `name` in `d` (never following a symlink): exactly with koffi, else to the µs. */
function setTimesAt(d: DirFd, name: string, ns: string): void {
  if (exactTimesSupported()) return utimesNsAt(d.fd, name, ns);
  const s = microSeconds(ns);
  fs.lutimesSync(d.path(name), s, s);
}

/** Makes the fifo `name` in `d` with `mkfifo` on the descriptor (a raw name is made under a plain one, then linked). */
async function makeFifo(d: DirFd, name: string): Promise<void> {
  if (d.lstat(name)) throw createError(d, name, Object.assign(new Error('exists'), { code: 'EEXIST' }));
  const made = hasEscape(name) ? `.awc-node-${randomBytes(6).toString('hex')}` : name;
  const r = await runWithDir('mkfifo', ['-m', '600', '--', `/proc/self/fd/3/${made}`], d);
  if (!r) throw new AwcError('E_UNSUPPORTED', `mkfifo is not installed: cannot create ${d.childRel(name)}`);
  if (r.code !== 0) throw new AwcError('E_IO', `mkfifo failed for ${d.childRel(name)}: ${r.stderr.trim() || `exit ${r.code}`}`);
  if (made === name) return;
  try {
    fs.linkSync(d.path(made), d.path(name));
  } catch (err) {
    throw createError(d, name, err);
  } finally {
    fs.rmSync(d.path(made), { force: true });
  }
}

/** A directory's attributes, set after the whole stream. */
interface DirLater {
  /** Slash path from the top ('' for the top). */
  rel: string;
  mode: number;
  mtimeNs: string;
}

/**
 * Extracts the tar stream `source` into the open directory `top` (new, empty, the user's)
 * by the rules of the module docs; the top member (`../`) gives `top` its mode and mtime.
 * Reads `source` to its end; on failure what was written stays (the caller removes `top`).
 * @returns what was left out (setuid/setgid bits cleared, user xattrs the file system refused)
 * @throws AwcError E_PATH_TRAVERSAL (a name or hardlink leaving `top`, or under a symlink),
 *   E_FORMAT (a malformed archive, a member given twice or before its directory, a hardlink to
 *   a missing member), E_PERMISSION (a device node), E_UNSUPPORTED (GNU sparse 0.x members,
 *   other member types), E_IO (the stream broke off), errno errors
 */
export async function extractTar(source: NodeJS.ReadableStream, top: DirFd, opts: ExtractTarOptions = {}): Promise<ExtractTarResult> {
  const ex = tarStream().extract({ filenameEncoding: 'latin1' } as Parameters<typeof TarStream.extract>[0]);
  const paxOf = rawPaxReader(ex);
  source.on('error', (err: Error) => ex.destroy(err));
  source.pipe(ex as unknown as NodeJS.WritableStream);
  const x = new Extraction(top, opts);
  try {
    for await (const entry of ex) {
      await x.member(readMember(entry.header, paxOf(entry.header)), entry as AsyncIterable<Buffer>);
      entry.resume(); // what a member has beyond its data (none for these types) is skipped
    }
    x.parents.close();
    x.finishDirs();
  } catch (err) {
    ex.destroy();
    throw err instanceof AwcError ? err : streamError(err);
  } finally {
    x.parents.close();
    x.linkParents.close();
  }
  return { leftOut: x.leftOut };
}

/** One member as the extraction reads it: its name and path components, mode bits, mtime (ns), the link target, user xattrs, and the writer of its data. */
interface ExtractMember extends Member {
  parts: string[];
  /** The mode's permission and special bits (0o7777). */
  mode: number;
  mtimeNs: string;
  /** The hardlink or symlink target (escaped raw bytes). */
  linkName(): string;
  xs: Map<string, Buffer>;
  writeData: MemberDataWriter;
}

/** Reads a member's name, times, mode and records from its header and raw pax records. @throws E_FORMAT, E_PATH_TRAVERSAL, E_UNSUPPORTED */
function readMember(header: TarStream.Header, pax: Map<string, Buffer>): ExtractMember {
  const text = (key: string): string | undefined => (pax.get(key)?.length ? pax.get(key)!.toString('utf8') : undefined);
  const shown = pax.get('path')?.length ? pax.get('path')! : Buffer.from(header.name, 'latin1');
  // before the name is resolved: a sparse member's real name is another record
  const { write: writeData, realName } = dataWriterFor(pax, nameFromBytes(shown));
  const name = nameFromBytes(realName?.length ? realName : shown);
  const paxMtime = text('mtime');
  const mtimeNs =
    paxMtime !== undefined ? paxTimeToNs(paxMtime) : String(BigInt(Math.floor((header.mtime?.getTime() ?? 0) / 1000)) * 1_000_000_000n);
  return {
    header,
    pax,
    name,
    parts: splitName(name),
    mode: (header.mode ?? 0) & 0o7777,
    mtimeNs,
    linkName: () => nameFromBytes(pax.get('linkpath')?.length ? pax.get('linkpath')! : Buffer.from(header.linkname ?? '', 'latin1')),
    xs: userXattrs(pax),
    writeData,
  };
}

/** One extraction under way into `top`: the opened parents, the directories whose attributes come last, and what was left out. */
class Extraction {
  readonly leftOut: ExtractTarResult['leftOut'] = [];
  readonly parents: Parents;
  readonly linkParents: Parents;
  private readonly umask: number;
  private readonly dirs: DirLater[] = [];
  private readonly dirIndex = new Map<string, number>();

  constructor(
    private readonly top: DirFd,
    private readonly opts: ExtractTarOptions,
  ) {
    this.umask = opts.umask ?? currentUmask();
    this.parents = new Parents(top);
    this.linkParents = new Parents(top);
  }

  /** A file's mode: the umask applied, setuid/setgid cleared (and recorded) unless privileges are kept. */
  private fileMode(rel: string, mode: number): number {
    let special = mode & 0o7000;
    if (!this.opts.keepPrivileges && (special & 0o6000) !== 0) {
      this.leftOut.push({ path: rel, reason: LEFT_OUT_CLEARED });
      special &= 0o1000;
    }
    return special | (mode & 0o777 & ~this.umask);
  }

  /** Sets the user xattrs `xs` on `objPath`; `rel` goes into `leftOut` when the file system has none. */
  private xattrsOn(objPath: string, rel: string, xs: Map<string, Buffer>): void {
    if (!setXattrs(objPath, xs)) this.leftOut.push({ path: rel, reason: LEFT_OUT_USER_XATTRS });
  }

  /** Records a directory's attributes for the end (a directory given again: its last attributes). @returns whether it was seen before */
  private dirLater(rel: string, m: ExtractMember): boolean {
    const later = { rel, mode: (m.mode & 0o7000) | (m.mode & 0o777 & ~this.umask), mtimeNs: m.mtimeNs };
    const again = this.dirIndex.get(rel);
    if (again !== undefined) this.dirs[again] = later;
    else this.dirIndex.set(rel, this.dirs.push(later) - 1);
    return again !== undefined;
  }

  /** Extracts one member (its data from `data`). @throws see extractTar */
  async member(m: ExtractMember, data: AsyncIterable<Buffer>): Promise<void> {
    if (m.parts.length === 0) {
      if (m.header.type !== 'directory') throw new AwcError('E_FORMAT', 'the tar root member is not a directory');
      this.xattrsOn(this.top.self, '', m.xs);
      this.dirLater('', m);
      return;
    }
    const leaf = m.parts[m.parts.length - 1]!;
    const d = this.parents.open(m.parts.slice(0, -1), m.name);
    const rel = d.childRel(leaf);
    switch (m.header.type) {
      case 'directory':
        return this.makeDir(d, leaf, rel, m);
      case 'file':
      case 'contiguous-file':
        return this.writeFile(d, leaf, rel, m, data);
      case 'link':
        return this.makeHardlink(d, leaf, m);
      case 'symlink':
        await symlink(fsPath(m.linkName()), d.path(leaf)).catch((err: unknown) => {
          throw createError(d, leaf, err);
        });
        return setTimesAt(d, leaf, m.mtimeNs);
      case 'fifo': {
        await makeFifo(d, leaf);
        const st = d.lstat(leaf);
        if (!st?.isFIFO()) throw new AwcError('E_PATH_TRAVERSAL', `refusing to write through ${rel}: it is no longer the fifo just made`);
        d.withObject(leaf, (obj) => fs.chmodSync(obj, this.fileMode(rel, m.mode)));
        return setTimesAt(d, leaf, m.mtimeNs);
      }
      case 'character-device':
      case 'block-device':
        throw new AwcError('E_PERMISSION', `${rel}: creating device nodes needs root`, {
          hint: 'An ordinary user cannot create device nodes: use `awc export <ref> --tar FILE`, or run export --dir as root.',
        });
      default:
        throw new AwcError('E_UNSUPPORTED', `tar member ${JSON.stringify(m.name)} has an unsupported type (${String(m.header.type)})`);
    }
  }

  /** A directory member: made 0700 (its mode and mtime come at the end), its xattrs set. */
  private makeDir(d: DirFd, leaf: string, rel: string, m: ExtractMember): void {
    if (this.dirIndex.has(rel)) {
      this.dirLater(rel, m);
      return;
    }
    let child: DirFd;
    try {
      child = d.mkdirOpen(leaf, 0o700);
    } catch (err) {
      throw err instanceof AwcError ? err : createError(d, leaf, err);
    }
    try {
      this.xattrsOn(child.self, rel, m.xs);
    } finally {
      child.close();
    }
    this.dirLater(rel, m);
  }

  /** A regular file member: created exclusively 0600 without following a symlink, its data written, then its mode, xattrs and mtime. */
  private async writeFile(d: DirFd, leaf: string, rel: string, m: ExtractMember, data: AsyncIterable<Buffer>): Promise<void> {
    const fh = await open(
      d.path(leaf),
      fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW,
      0o600,
    ).catch((err: unknown) => {
      throw createError(d, leaf, err);
    });
    try {
      await m.writeData(fh, data, m);
      await fh.chmod(this.fileMode(rel, m.mode));
      this.xattrsOn(fdPath(fh.fd), rel, m.xs);
      futimesNs(fh.fd, m.mtimeNs);
    } finally {
      await fh.close();
    }
  }

  /** A hardlink member: a link to an earlier file of the archive. @throws E_PATH_TRAVERSAL (the top), E_FORMAT (no such earlier file) */
  private async makeHardlink(d: DirFd, leaf: string, m: ExtractMember): Promise<void> {
    const target = splitName(m.linkName());
    if (target.length === 0) throw new AwcError('E_PATH_TRAVERSAL', `hardlink ${JSON.stringify(m.name)} names the top directory`);
    const from = this.linkParents.open(target.slice(0, -1), m.name);
    try {
      await link(from.path(target[target.length - 1]!), d.path(leaf));
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT' || code === 'EPERM')
        throw new AwcError(
          'E_FORMAT',
          `hardlink ${JSON.stringify(m.name)} names ${JSON.stringify(m.linkName())}, which is not an earlier file of the archive`,
        );
      throw createError(d, leaf, err);
    }
  }

  /** Directories last, children before their parents (a parent may lose its write or search bit): their modes and mtimes. */
  finishDirs(): void {
    for (let i = this.dirs.length - 1; i >= 0; i--) {
      const { rel, mode, mtimeNs } = this.dirs[i]!;
      if (rel === '') {
        fs.fchmodSync(this.top.fd, mode);
        futimesNs(this.top.fd, mtimeNs);
        continue;
      }
      const parts = rel.split('/');
      const leaf = parts.pop()!;
      const p = this.parents.open(parts, rel);
      p.withObject(leaf, (obj) => fs.chmodSync(obj, mode));
      setTimesAt(p, leaf, mtimeNs);
    }
  }
}

/** A failure of tar-stream (a truncated or corrupt stream) or of the system, as an AwcError. */
function streamError(err: unknown): AwcError {
  if ((err as NodeJS.ErrnoException).code) return toAwcError(err);
  return new AwcError('E_IO', `the export stream broke off: ${(err as Error).message}`, { cause: err });
}
