import { once } from 'node:events';
import { lstat, stat } from 'node:fs/promises';
import { dirname } from 'node:path';
import type * as TarStream from 'tar-stream';
import { lazyRequire } from '../../core/lazy-require.js';
import type { Digest } from '../../core/digest.js';
import { AwcError, toAwcError } from '../../core/errors.js';
import { splitDev, type Entry, type EntryAttrs, type FileEntry, type TreeObject } from '../../core/tree.js';
import type { ExportCounts } from '../../host/tree/export-dir.js';
import type { ContentReader } from '../../store/content/content-reader.js';
import { ReadWindow, type ReadWindowOptions, type TreeContentSource } from '../../store/content/read-window.js';
import { RawPax, type RawPaxRecord } from './pax-raw.js';
import { PendingFile } from './pending-file.js';
import { hasEscape, nameToBytes } from '../../core/raw-name.js';
import { dataBytes } from '../../core/sparse.js';
import { sparseHeaderName, sparseMapBlock, sparsePax } from './tar-sparse.js';

/** `first`, then the buffers of `rest`. */
async function* prepend(first: Buffer, rest: AsyncIterable<Buffer>): AsyncIterable<Buffer> {
  yield first;
  yield* rest;
}

/** tar-stream, loaded when a tar is first written. */
const tarStream = lazyRequire<typeof TarStream>('tar-stream');

/**
 * Exporting a snapshot as a pax tar archive (POSIX.1-2001), readable by GNU tar, bsdtar
 * and `importTar`.
 *
 * Layout: the root is the entry `../`, every other entry `./<path>` (directories with a
 * trailing `/`), in depth-first, name-sorted order (a directory before its contents, a
 * hardlinked file's first name before its other names). Every entry has a pax extended
 * header with `path` (and `linkpath`), `mtime=<sec>.<9-digit ns>` exactly, `uid`, `gid`,
 * `size` for files of 8 GiB and more, and one `SCHILY.xattr.<name>=<value>` record per
 * xattr with its value's raw bytes, binary ones included (file capabilities, ACLs; written
 * through src/service/tar/pax-raw.ts; GNU tar restores them all with `--xattrs
 * --xattrs-include='*'`, bsdtar reads them too); only a name containing `=` is written as
 * `LIBARCHIVE.xattr.<url-encoded name>=<base64 value>` (bsdtar's form; GNU tar ignores it with a warning).
 * The ustar header carries mode (07777 incl. setuid/setgid/sticky), type, size and device
 * numbers (its name field is tar-stream's placeholder `PaxHeader`: readers without pax
 * support cannot use these archives).
 * A sparse file (tree v3) is a GNU sparse 1.0 member (src/service/tar/tar-sparse.ts): its map and
 * data only, its holes never written; GNU tar extracts it with the holes.
 * Hardlinks are type `link` with the first name (`./<target>`) as target; fifos and
 * devices are recorded with their major/minor numbers.
 */

/** A tar target must not exist yet (not even as a dangling symlink), and its directory must. @throws E_TARGET_EXISTS, E_USAGE, E_NAME_TOO_LONG */
export async function checkTarTarget(path: string): Promise<void> {
  const missing = (err: unknown) => (err as NodeJS.ErrnoException).code === 'ENOENT';
  const target = await lstat(path).catch((err: unknown) => {
    if (missing(err)) return undefined;
    throw toAwcError(err);
  });
  if (target)
    throw new AwcError('E_TARGET_EXISTS', `${path} already exists`, { hint: 'Export to a new file name, or remove the file first.' });
  const parent = dirname(path);
  const dir = await stat(parent).catch((err: unknown) => {
    if (missing(err) || (err as NodeJS.ErrnoException).code === 'ENOTDIR') return undefined;
    throw toAwcError(err);
  });
  if (!dir?.isDirectory())
    throw new AwcError('E_USAGE', `the directory ${parent} does not exist`, {
      hint: 'Export into an existing directory: create it first (mkdir -p), or name a file in one.',
    });
}

const S_IF: Record<Exclude<Entry['type'], 'hardlink'>, number> = {
  file: 0o100000,
  dir: 0o040000,
  symlink: 0o120000,
  fifo: 0o010000,
  chardev: 0o020000,
  blockdev: 0o060000,
};
const TAR_TYPE = {
  file: 'file',
  dir: 'directory',
  symlink: 'symlink',
  fifo: 'fifo',
  chardev: 'character-device',
  blockdev: 'block-device',
} as const;
/** What we pass to tar-stream's `pack.entry`: its header plus our pax records (tar-stream types `pax` as unknown). */
type TarHeader = Partial<TarStream.Header> & { name: string; pax: Record<string, string> };

const USTAR_MAX_ID = 0o7777777;
const USTAR_MAX_DEV = 0o777777;
const USTAR_MAX_SIZE = 0o77777777777;

/** Nanoseconds since the epoch (decimal string) as a pax time: `[-]<sec>.<9 digits>`, exact. */
export function nsToPaxTime(ns: string): string {
  const n = BigInt(ns);
  const abs = n < 0n ? -n : n;
  return `${n < 0n ? '-' : ''}${abs / 1_000_000_000n}.${(abs % 1_000_000_000n).toString().padStart(9, '0')}`;
}

/** ustar header fallback mtime: whole seconds, clamped to what tar-stream can encode. */
function ustarMtime(ns: string): Date {
  const sec = Number(BigInt(ns) / 1_000_000_000n);
  return new Date(Math.min(Math.max(sec, 0), 2 ** 31 - 1) * 1000);
}

/**
 * pax records of one entry's attributes: text records, and (with `raw`) the records whose
 * values are raw bytes (an xattr value that is not UTF-8, written through RawPax).
 */
function paxRecords(a: EntryAttrs, raw: boolean): { pax: Record<string, string>; rawPax: RawPaxRecord[] } {
  const pax: Record<string, string> = { mtime: nsToPaxTime(a.mtimeNs), uid: String(a.uid), gid: String(a.gid) };
  const rawPax: RawPaxRecord[] = [];
  for (const [name, b64] of Object.entries(a.xattrs ?? {})) {
    const value = Buffer.from(b64, 'base64');
    const text = value.toString('utf8');
    if (!name.includes('=') && Buffer.from(text, 'utf8').equals(value)) pax[`SCHILY.xattr.${name}`] = text;
    else if (!name.includes('=') && raw) rawPax.push({ key: `SCHILY.xattr.${name}`, value });
    else pax[`LIBARCHIVE.xattr.${encodeURIComponent(name)}`] = b64;
  }
  return { pax, rawPax };
}

/**
 * Writes the snapshot `root` as a pax tar archive to `out`: a file path that must not exist
 * (written under a temporary name beside it, mode 0600, and moved there only once complete
 * and fsynced; on any failure nothing is left), or a writable stream, which is ended. Trees
 * and file contents are read through the cross-file read window (src/store/content/read-window.ts;
 * `opts.readWindow`: its bounds, or `false` to read each file on its own through `reader`),
 * streamed, never held whole.
 *
 * @returns regular files (each hardlinked inode once) and their bytes.
 * @throws AwcError E_OBJECT_NOT_FOUND / E_INTEGRITY from the reader, E_FORMAT for a
 *   hardlink whose target is not an earlier regular file, E_UNSUPPORTED for device numbers
 *   beyond the ustar fields; on write errors E_NO_SPACE, E_READ_ONLY, E_PERMISSION, E_IO,
 *   E_CLOSED_PIPE (a stream whose reader went away), E_TARGET_EXISTS (the file appeared meanwhile).
 */
export async function exportTar(
  reader: ContentReader,
  root: Digest,
  out: string | NodeJS.WritableStream,
  opts: { readWindow?: ReadWindowOptions | false } = {},
): Promise<ExportCounts> {
  // Trees and files in walk order through the read window (src/store/content/read-window.ts); `false`: each file on its own through `reader`.
  const window = opts.readWindow === false ? undefined : new ReadWindow(reader, root, opts.readWindow);
  try {
    return await writeTar(reader, window ?? reader, root, out);
  } finally {
    window?.close();
  }
}

/** exportTar reading the walk through `walker` (hardlink targets through `reader`, off the walk order). */
async function writeTar(
  reader: ContentReader,
  walker: TreeContentSource,
  root: Digest,
  out: string | NodeJS.WritableStream,
): Promise<ExportCounts> {
  const pack = tarStream().pack();
  const rawPax = RawPax.hook(pack); // binary xattr values as raw SCHILY.xattr records (GNU tar's form)
  const file = typeof out === 'string' ? await PendingFile.create(out) : undefined;
  const dest: NodeJS.WritableStream = file ? file.stream() : (out as NodeJS.WritableStream);
  /** The first write error: it is what failed, whatever the entries being written then report. */
  let writeError: unknown;

  const piped = new Promise<void>((resolve, reject) => {
    dest.on('error', (err: Error) => {
      writeError ??= err;
      pack.destroy(err);
      reject(err);
    });
    pack.on('error', (err: Error) => reject(err));
    dest.on('finish', () => resolve());
    pack.pipe(dest);
  });
  piped.catch(() => undefined);

  try {
    const counts = await new TarWriter(reader, walker, pack, rawPax).write(root);
    pack.finalize();
    await piped;
    await file?.commit();
    return counts;
  } catch (err) {
    const cause = writeError ?? err; // what failed, not what the clean-up below may report
    pack.destroy(err as Error);
    throw await abandonTar(cause, dest, file);
  }
}

/**
 * After a failed export: lets a pending file's stream finish the writes it has (it leaves the
 * descriptor open: destroying it would close the descriptor that abort() closes too), then
 * removes the pending file (no partial archive left behind).
 * @returns the error to throw for `cause`: E_CLOSED_PIPE for a stream whose reader went away
 */
async function abandonTar(cause: unknown, dest: NodeJS.WritableStream, file: PendingFile | undefined): Promise<AwcError> {
  if (file) {
    const ws = dest as import('node:fs').WriteStream;
    if (!ws.writableFinished && !ws.errored)
      await new Promise<void>((resolve) => {
        ws.once('finish', resolve);
        ws.once('error', () => resolve());
        ws.end();
      });
  }
  await file?.abort();
  if (!file && (cause as NodeJS.ErrnoException).code === 'EPIPE')
    return new AwcError('E_CLOSED_PIPE', 'the reader of the archive closed the pipe', { cause });
  return toAwcError(cause);
}

/** A header's source: any entry but a hardlink (a hardlink is written with its target's attributes). */
type HeaderSource = Exclude<Entry, { type: 'hardlink' }> | (EntryAttrs & { type: 'file' });

/** One snapshot walked into a tar-stream packer: the walk, the headers, and the counts of regular files and their bytes. */
class TarWriter {
  private readonly counts: ExportCounts = { files: 0, bytes: 0 };
  private readonly trees = new Map<Digest, TreeObject>();
  /** Paths of files already written (hardlink targets must precede). */
  private readonly emitted = new Set<string>();
  private rootTree = '' as Digest;

  constructor(
    private readonly reader: ContentReader,
    private readonly walker: TreeContentSource,
    private readonly pack: TarStream.Pack,
    private readonly rawPax: RawPax | undefined,
  ) {}

  /** Writes the root directory and every entry below it. @returns the counts. @throws see exportTar */
  async write(root: Digest): Promise<ExportCounts> {
    const r = await this.walker.readRoot(root);
    this.rootTree = r.tree;
    await this.addEntry(this.header('.', { ...r, type: 'dir', name: '.' }));
    await this.walk(r.tree, '');
    return this.counts;
  }

  /** Names that are not UTF-8 go as raw `path`/`linkpath` records under `hdrcharset=BINARY` (src/service/tar/pax-raw.ts). */
  private rawNames(h: TarHeader): void {
    const records: RawPaxRecord[] = [];
    if (hasEscape(h.name)) records.push({ key: 'path', value: nameToBytes(h.name) });
    if (h.linkname && hasEscape(h.linkname)) records.push({ key: 'linkpath', value: nameToBytes(h.linkname) });
    if (records.length === 0) return;
    if (!this.rawPax)
      throw new AwcError('E_UNSUPPORTED', `${JSON.stringify(h.name)}: this tar-stream cannot write names that are not UTF-8`);
    this.rawPax.attach(h, [{ key: 'hdrcharset', value: Buffer.from('BINARY') }, ...records]);
  }

  /** Writes one entry (a regular file's body from `body`), resolved once the packer has it. */
  private addEntry(header: TarHeader, body?: AsyncIterable<Buffer>): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.rawNames(header);
      const sink = this.pack.entry(header, (err) => (err ? reject(err) : resolve()));
      sink.on('error', () => undefined); // reported through the entry's callback
      if (header.type !== 'file') return;
      (async () => {
        if (body) for await (const buf of body) if (!sink.write(buf)) await once(sink, 'drain');
        sink.end(undefined);
      })().catch((err) => {
        sink.destroy(err);
        reject(err);
      });
    });
  }

  /** The header of `e` at `path` (a directory's name ends in `/`), with its pax records. */
  private header(path: string, e: HeaderSource): TarHeader {
    const name = e.type === 'dir' ? `${path}/` : path;
    const { pax, rawPax: raw } = paxRecords(e, this.rawPax !== undefined);
    const h: TarHeader = {
      name, // tar-stream writes it as the pax `path` record
      type: TAR_TYPE[e.type],
      // tar-stream replaces a falsy mode by a default: pass the type bits too (it masks 07777).
      mode: S_IF[e.type] | e.mode,
      uid: Math.min(e.uid, USTAR_MAX_ID),
      gid: Math.min(e.gid, USTAR_MAX_ID),
      mtime: ustarMtime(e.mtimeNs),
      size: 0,
      pax,
    };
    this.rawPax?.attach(h, raw);
    return h;
  }

  private async readTree(d: Digest): Promise<TreeObject> {
    let t = this.trees.get(d);
    if (!t) {
      t = await this.reader.readTree(d);
      this.trees.set(d, t);
    }
    return t;
  }

  /** The file entry a hardlink names (path from the root), or undefined. */
  private async resolveLink(target: string): Promise<FileEntry | undefined> {
    let tree = this.rootTree;
    const parts = target.split('/');
    for (let i = 0; i < parts.length; i++) {
      const e = (await this.readTree(tree)).entries.find((x) => x.name === parts[i]);
      if (i === parts.length - 1) return e?.type === 'file' ? e : undefined;
      if (e?.type !== 'dir') return undefined;
      tree = e.tree;
    }
    return undefined;
  }

  /** Writes the entries of `tree` (at `prefix`, '' for the root) depth first. */
  private async walk(tree: Digest, prefix: string): Promise<void> {
    const t = await this.walker.readTree(tree);
    for (const e of t.entries) {
      const rel = prefix === '' ? e.name : `${prefix}/${e.name}`;
      await this.entry(e, rel, `./${rel}`);
    }
  }

  /** Writes one entry at `rel` (its tar name `path`), and below it for a directory. @throws E_FORMAT, E_UNSUPPORTED */
  private async entry(e: Entry, rel: string, path: string): Promise<void> {
    switch (e.type) {
      case 'dir':
        await this.addEntry(this.header(path, e));
        return this.walk(e.tree, rel);
      case 'file':
        return this.fileEntry(e, rel, path);
      case 'hardlink': {
        const target = this.emitted.has(e.target) ? await this.resolveLink(e.target) : undefined;
        if (!target)
          throw new AwcError(
            'E_FORMAT',
            `hardlink ${rel} names ${JSON.stringify(e.target)}, which is not an earlier regular file of the snapshot`,
          );
        const h = this.header(path, target);
        h.type = 'link';
        h.linkname = `./${e.target}`; // written as the pax `linkpath` record
        return this.addEntry(h);
      }
      case 'symlink': {
        const h = this.header(path, e);
        h.linkname = e.target;
        return this.addEntry(h);
      }
      case 'fifo':
        return this.addEntry(this.header(path, e));
      case 'chardev':
      case 'blockdev': {
        const { major, minor } = splitDev(e.rdev);
        if (major > USTAR_MAX_DEV || minor > USTAR_MAX_DEV)
          throw new AwcError('E_UNSUPPORTED', `${rel}: device ${major}:${minor} does not fit a ustar header`);
        const h = this.header(path, e);
        h.devmajor = major;
        h.devminor = minor;
        return this.addEntry(h);
      }
      default:
        throw new AwcError('E_FORMAT', `${rel}: unknown entry type ${JSON.stringify((e as { type: unknown }).type)}`);
    }
  }

  /** A regular file: its header and content (a sparse one as GNU sparse 1.0, src/service/tar/tar-sparse.ts: the map, then only the data). */
  private async fileEntry(e: FileEntry, rel: string, path: string): Promise<void> {
    const h = this.header(path, e);
    h.size = e.size;
    let body = e.extents ? undefined : this.walker.readFile(e);
    if (e.extents) {
      const map = sparseMapBlock(e.size, e.extents);
      h.name = sparseHeaderName(path);
      Object.assign(h.pax, sparsePax(path, e.size));
      if (hasEscape(path)) {
        if (!this.rawPax)
          throw new AwcError('E_UNSUPPORTED', `${JSON.stringify(path)}: this tar-stream cannot write names that are not UTF-8`);
        delete h.pax['GNU.sparse.name'];
        this.rawPax.attach(h, [{ key: 'GNU.sparse.name', value: nameToBytes(path) }]);
      }
      h.size = map.length + dataBytes(e.extents);
      body = prepend(map, this.walker.readData(e));
    }
    if (h.size > USTAR_MAX_SIZE) h.pax.size = String(h.size);
    await this.addEntry(h, body);
    this.counts.files++;
    this.counts.bytes += e.size;
    this.emitted.add(rel);
  }
}
