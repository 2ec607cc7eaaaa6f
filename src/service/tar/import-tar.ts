import { readSparseMember, sparseMember } from './tar-sparse.js';
import { sparseOf } from '../../core/sparse.js';
import { closeSync, createReadStream, openSync, readSync } from 'node:fs';
import { open, stat } from 'node:fs/promises';
import { createGunzip } from 'node:zlib';
import type * as TarStream from 'tar-stream';
import { lazyRequire } from '../../core/lazy-require.js';
import type { Digest } from '../../core/digest.js';
import { AwcError, ERROR_CODES, toAwcError } from '../../core/errors.js';
import { checkName, compareNames, type Entry, type EntryAttrs } from '../../core/tree.js';
import type { ContentWriter, FileContent } from '../../store/content/content-writer.js';
import { nameFromBytes } from '../../core/raw-name.js';
import { type ImportProgress, type ImportResult, type ImportWarning } from '../../host/tree/import-dir.js';
import { classifyXattr } from '../../host/tree/xattrs.js';
import type { TarCapture } from '../capture/tar-capture.js';
import { PEEK_MAX_BYTES } from '../../core/capture-filter.js';
import { LinkHeads } from '../capture/capture-policy.js';
import { rawPaxReader } from './pax-raw.js';

/** tar-stream, loaded when a tar is first read. */
const tarStream = lazyRequire<typeof TarStream>('tar-stream');

/**
 * Importing a tar archive as a snapshot.
 *
 * Reads ustar, GNU and pax archives (tar-stream), plain or (for a path) gzip-compressed.
 * The whole tree is built in memory (metadata only; file contents are streamed into the
 * writer as they arrive, never buffered whole) and written bottom-up at the end.
 *
 * - Paths: a leading `../` and `.` components are ignored; `..` components and absolute
 *   names are refused (E_PATH_TRAVERSAL), for entries and hardlink targets alike. Names
 *   and link targets are any bytes (pax `path`/`linkpath` records read raw, as with
 *   `hdrcharset=BINARY`; header fields byte for byte), held escaped (src/core/raw-name.ts). The entry `../` (or `.`) gives the root's
 *   attributes; directories that are only implied by deeper entries get mode 0755,
 *   uid/gid 0, mtime 0. A later entry for the same path replaces the earlier one (as tar
 *   extraction does), except that a directory cannot be replaced by a non-directory
 *   (E_FORMAT).
 * - Times: the pax `mtime` record (`<sec>[.<fraction>]`, possibly negative) is converted to
 *   nanoseconds with string arithmetic (exact to 1 ns); without it, the header's whole seconds.
 *   pax `uid`/`gid` override the header's.
 * - Xattrs: pax `SCHILY.xattr.<name>=<raw bytes>` (GNU tar, star, AWC) and
 *   `LIBARCHIVE.xattr.<url-encoded name>=<base64>` (bsdtar, and AWC for values that are not
 *   UTF-8); every namespace recorded (`user.*`, `security.*`, `system.posix_acl_*`, `trusted.*`)
 *   except `trusted.overlay.*`, which is dropped (src/host/tree/xattrs.ts).
 * - Hardlinks must name an entry seen earlier in the archive (else E_FORMAT). All names of
 *   one file are resolved as in `importDir`: the first in depth-first, name-sorted order is
 *   the `file` entry, the others `hardlink`s to it, whatever the archive's order. A
 *   hardlink to a symlink, fifo or device is recorded as a copy (`W_HARDLINK_COPIED`).
 * - GNU sparse members of format 1.0 (`tar --format=posix --sparse`) become sparse files
 *   (src/service/tar/tar-sparse.ts); formats 0.0/0.1, old GNU sparse (`S`), multi-volume and
 *   other vendor types are unsupported (E_UNSUPPORTED).
 * - With a capture filter, a regular file it calls secret is read past (its bytes never
 *   reach the writer), and so is a hardlink to one or a hardlink with a secret's name (one
 *   judged by content, as `*.pem`, by its file's content: a CA bundle's `roots.pem` is kept).
 */

/** Options of `importTar`. */
export interface ImportTarOptions {
  /** Called after each regular file's content is stored, with cumulative counts (files, bytes). */
  onProgress?: (p: ImportProgress) => void;
  /** Called for each non-fatal problem (`W_HARDLINK_COPIED`). */
  onWarning?: (w: ImportWarning) => void;
  /** The capture filter (docs/explanation/capture-classes.md#tar-imports): regular files it leaves out are read past, never stored. */
  capture?: TarCapture;
}

interface Inode {
  attrs: EntryAttrs;
  content: FileContent;
}

type Node =
  { kind: 'dir'; attrs: EntryAttrs; children: Map<string, Node> } | { kind: 'file'; inode: Inode } | { kind: 'leaf'; entry: Entry };

type DirNode = Extract<Node, { kind: 'dir' }>;

const DEFAULT_DIR_ATTRS: EntryAttrs = { mode: 0o755, uid: 0, gid: 0, mtimeNs: '0' };

/**
 * Converts a pax time (`[-]<sec>[.<fraction>]`, seconds since the epoch) to nanoseconds as a
 * decimal string, exactly (digits beyond 9 are truncated). `-1.5` is -1.5 s.
 * @throws E_FORMAT when it is not such a number.
 */
export function paxTimeToNs(s: string): string {
  const m = /^(-?)(\d+)(?:\.(\d*))?$/.exec(s.trim());
  if (!m) throw new AwcError('E_FORMAT', `malformed pax time ${JSON.stringify(s)}`);
  const ns = BigInt(m[2]) * 1_000_000_000n + BigInt((m[3] ?? '').padEnd(9, '0').slice(0, 9));
  return (m[1] ? -ns : ns).toString();
}

/** Linux `makedev`: the kernel's dev_t encoding of a device's major and minor numbers. */
export function makeDev(major: number, minor: number): number {
  const ma = BigInt(major);
  const mi = BigInt(minor);
  return Number((mi & 0xffn) | ((ma & 0xfffn) << 8n) | ((mi & ~0xffn) << 12n) | ((ma & ~0xfffn) << 32n));
}

/** Splits a tar path into checked components; an empty array is the root. */
function splitPath(raw: string): string[] {
  if (raw.startsWith('/')) throw new AwcError('E_PATH_TRAVERSAL', `tar entry has an absolute name: ${JSON.stringify(raw)}`);
  const parts = raw.split('/').filter((p) => p !== '' && p !== '.');
  for (const p of parts) {
    if (p === '..') throw new AwcError('E_PATH_TRAVERSAL', `tar entry name leaves the archive root: ${JSON.stringify(raw)}`);
    checkName(p, true);
  }
  return parts;
}

type TarHeader = TarStream.Header & { pax?: Record<string, string> | null };

/**
 * Imports a tar archive (a file path, or a readable stream of an uncompressed tar) as a
 * snapshot through `writer` and returns its root digest and counts (`fileCount`: regular
 * files, each hardlinked inode once; `byteCount`: their bytes; `skipped` is always empty:
 * tar has no sockets). Nothing is persisted until the caller runs `writer.flush()`.
 *
 * @throws AwcError E_SOURCE_NOT_FOUND (no such file), E_PATH_TRAVERSAL (`..` or absolute
 *   names), E_FORMAT (corrupt or truncated
 *   archive, hardlink to an unknown entry), E_UNSUPPORTED (GNU sparse 0.x, vendor entry types).
 */
export async function importTar(
  tarPath: string | NodeJS.ReadableStream,
  writer: ContentWriter,
  opts: ImportTarOptions = {},
): Promise<ImportResult> {
  const source = typeof tarPath === 'string' ? await openTarFile(tarPath) : tarPath;
  const ex = tarStream().extract({ filenameEncoding: 'latin1' } as Parameters<typeof TarStream.extract>[0]);
  const paxOf = rawPaxReader(ex);
  source.on('error', (err: Error) => ex.destroy(err));
  source.pipe(ex as unknown as NodeJS.WritableStream);
  const run: TarImport = { tree: new TarTree(opts.capture), writer, opts, progress: { files: 0, bytes: 0 }, heads: new LinkHeads<Inode>() };
  try {
    for await (const entry of ex) await importEntry(run, entry, paxOf(entry.header));
  } catch (err) {
    ex.destroy();
    if (typeof tarPath === 'string') (source as NodeJS.ReadableStream & { destroy(): void }).destroy();
    else source.unpipe(ex as unknown as NodeJS.WritableStream);
    throw tarError(err);
  }
  opts.capture?.finish();
  return writeTarTree(writer, run.tree.root);
}

/** One import under way: the tree built so far, the writer, the options, the progress counts, and the first bytes of stored files (to judge their hardlinks by content). */
interface TarImport {
  tree: TarTree;
  writer: ContentWriter;
  opts: ImportTarOptions;
  progress: ImportProgress;
  heads: LinkHeads<Inode>;
}

/** One tar member as the import reads it: its header, raw pax records, checked path components and raw (escaped) name, and its attributes. */
interface TarMember {
  header: TarHeader;
  pax: Map<string, Buffer>;
  parts: string[];
  rawName: string;
  attrs: EntryAttrs;
  /** GNU sparse 1.0 (src/service/tar/tar-sparse.ts): its real name and size. */
  sparse: ReturnType<typeof sparseMember>;
}

/** The tree an import builds in memory (metadata only), with the capture filter's record of what was stored and left out. */
class TarTree {
  readonly root: DirNode = { kind: 'dir', attrs: { ...DEFAULT_DIR_ATTRS }, children: new Map() };

  constructor(private readonly capture: TarCapture | undefined) {}

  /** The directory holding `parts` (created with default attributes where missing). @throws E_PATH_TRAVERSAL (under a symlink), E_FORMAT (under a non-directory) */
  parentOf(parts: string[], raw: string): DirNode {
    let dir = this.root;
    for (let i = 0; i < parts.length - 1; i++) {
      let next = dir.children.get(parts[i]);
      if (!next) {
        next = { kind: 'dir', attrs: { ...DEFAULT_DIR_ATTRS }, children: new Map() };
        dir.children.set(parts[i], next);
      }
      if (next.kind !== 'dir') {
        const viaSymlink = next.kind === 'leaf' && next.entry.type === 'symlink';
        throw new AwcError(
          viaSymlink ? 'E_PATH_TRAVERSAL' : 'E_FORMAT',
          `tar entry ${JSON.stringify(raw)} lies under a ${viaSymlink ? 'symlink' : 'non-directory'}`,
        );
      }
      dir = next;
    }
    return dir;
  }

  /** The node at `parts`, if any. */
  lookup(parts: string[]): Node | undefined {
    let node: Node | undefined = this.root;
    for (const p of parts) {
      if (!node || node.kind !== 'dir') return undefined;
      node = node.children.get(p);
    }
    return node;
  }

  /** Puts `node` at `parts` (a directory seen again keeps its contents). @throws E_FORMAT (a directory replaced by a non-directory) */
  place(parts: string[], raw: string, node: Node): void {
    const parent = this.parentOf(parts, raw);
    const name = parts[parts.length - 1];
    const old = parent.children.get(name);
    if (old?.kind === 'dir') {
      if (node.kind !== 'dir') throw new AwcError('E_FORMAT', `tar entry ${JSON.stringify(raw)} replaces a directory with a non-directory`);
      old.attrs = node.attrs; // a directory entry seen again (or after its contents): keep the contents
      return;
    }
    parent.children.set(name, node);
    this.capture?.stored(parts.join('/'));
  }

  /** A file the capture filter left out: an earlier entry at its path goes (the archive's last word on a path wins). */
  leaveOut(parts: string[], raw: string, verdict: 'secret' | 'scratch', size: number): void {
    const parent = this.parentOf(parts, raw);
    if (parent.children.get(parts[parts.length - 1])?.kind === 'dir')
      throw new AwcError('E_FORMAT', `tar entry ${JSON.stringify(raw)} replaces a directory with a non-directory`);
    parent.children.delete(parts[parts.length - 1]);
    this.capture!.leftOut(parts.join('/'), verdict, size);
  }
}

/** Reads one member's name, path and attributes from its header and raw pax records. @throws E_PATH_TRAVERSAL, E_FORMAT */
function memberOf(header: TarHeader, pax: Map<string, Buffer>): TarMember {
  const text = (key: string): string | undefined => {
    const v = pax.get(key);
    return v && v.length > 0 ? v.toString('utf8') : undefined;
  };
  const sparse = sparseMember(pax, header.name);
  const rawName = nameFromBytes(
    sparse?.name?.length ? sparse.name : pax.get('path')?.length ? pax.get('path')! : Buffer.from(header.name, 'latin1'),
  );
  const parts = splitPath(rawName);
  return { header, pax, parts, rawName, attrs: paxAttrs(header, pax, text, rawName), sparse };
}

/** Adds one archive member to the tree (a regular file's content through the writer). @throws see importTar */
async function importEntry(
  run: TarImport,
  entry: { header: TarStream.Header } & AsyncIterable<unknown>,
  pax: Map<string, Buffer>,
): Promise<void> {
  const m = memberOf(entry.header as TarHeader, pax);
  const type = m.header.type;
  if (type === 'file' || type === 'contiguous-file') return importFile(run, m, entry as AsyncIterable<Buffer>);
  await drain(entry as AsyncIterable<unknown>);
  if (type === 'directory') {
    if (m.parts.length === 0) run.tree.root.attrs = m.attrs;
    else run.tree.place(m.parts, m.rawName, { kind: 'dir', attrs: m.attrs, children: new Map() });
    return;
  }
  if (m.parts.length === 0) throw new AwcError('E_FORMAT', 'the tar root entry is not a directory');
  const rawLink = m.pax.get('linkpath')?.length
    ? m.pax.get('linkpath')!
    : m.header.linkname
      ? Buffer.from(m.header.linkname, 'latin1')
      : undefined;
  if (type === 'link') return importHardlink(run, m, rawLink);
  run.tree.place(m.parts, m.rawName, { kind: 'leaf', entry: leafOf(m, rawLink) });
}

/** A symlink, fifo or device member's entry. @throws E_UNSUPPORTED (any other member type) */
function leafOf(m: TarMember, rawLink: Buffer | undefined): Entry {
  const name = m.parts[m.parts.length - 1];
  const type = m.header.type;
  if (type === 'symlink') return { type: 'symlink', name, ...m.attrs, target: rawLink ? nameFromBytes(rawLink) : '' };
  if (type === 'fifo') return { type: 'fifo', name, ...m.attrs, rdev: 0 };
  if (type === 'character-device' || type === 'block-device') {
    const rdev = makeDev(m.header.devmajor ?? 0, m.header.devminor ?? 0);
    return { type: type === 'character-device' ? 'chardev' : 'blockdev', name, ...m.attrs, rdev };
  }
  throw new AwcError('E_UNSUPPORTED', `tar entry ${JSON.stringify(m.rawName)} has an unsupported type (${String(type)})`);
}

/**
 * A regular file member: judged by the capture filter (a file it leaves out is read past),
 * else its content streamed into the writer (a sparse one through its map).
 * @throws E_FORMAT (the root entry is a file, a truncated member)
 */
async function importFile(run: TarImport, m: TarMember, body: AsyncIterable<Buffer>): Promise<void> {
  const { parts, rawName, header, sparse } = m;
  if (parts.length === 0) throw new AwcError('E_FORMAT', 'the tar root entry is not a directory');
  let data = body;
  let judged: Buffer | undefined;
  if (run.opts.capture) {
    const head = await takeHead(data, sparse ? 0 : PEEK_MAX_BYTES);
    const verdict = await run.opts.capture.verdict(parts, sparse ? () => Buffer.alloc(0) : head.peek); // a sparse body starts with its map
    if (verdict !== 'store') {
      if ((await drain(head.rest)) !== header.size) throw new AwcError('E_FORMAT', `tar entry ${JSON.stringify(rawName)} is truncated`);
      run.tree.leaveOut(parts, rawName, verdict, sparse?.size ?? header.size ?? 0);
      return;
    }
    data = head.rest;
    judged = sparse ? undefined : head.peek(PEEK_MAX_BYTES);
  }
  const content = sparse
    ? await readSparseMember(run.writer, data, header.size ?? 0, sparse.size, rawName)
    : await run.writer.writeStream(data);
  if (content.size !== (sparse ? sparse.size : header.size))
    throw new AwcError('E_FORMAT', `tar entry ${JSON.stringify(rawName)} is truncated`);
  const inode = { attrs: m.attrs, content };
  run.heads.keep(inode, judged);
  run.tree.place(parts, rawName, { kind: 'file', inode });
  run.progress.files++;
  run.progress.bytes += content.size;
  run.opts.onProgress?.({ ...run.progress });
}

/**
 * A hardlink member: left out when it names a secret (or is one by its file's content), a
 * second name of its target's inode, or a copy of a symlink, fifo or device (W_HARDLINK_COPIED).
 * @throws E_FORMAT (no target, an unknown target, a directory), E_PATH_TRAVERSAL
 */
async function importHardlink(run: TarImport, m: TarMember, rawLink: Buffer | undefined): Promise<void> {
  const { parts, rawName } = m;
  if (!rawLink) throw new AwcError('E_FORMAT', `hardlink ${JSON.stringify(rawName)} has no target`);
  const targetName = nameFromBytes(rawLink);
  const targetParts = splitPath(targetName);
  const target = run.tree.lookup(targetParts);
  const leftOutSize = run.opts.capture?.secretSize(targetParts.join('/'));
  if (leftOutSize !== undefined) {
    run.tree.leaveOut(parts, rawName, 'secret', leftOutSize); // a second name of a secret: its bytes are the secret's
    return;
  }
  // a second name judged by the file's content (a CA bundle's hardlink named *.pem is kept)
  if (target?.kind === 'file' && (await run.opts.capture?.verdict(parts, run.heads.peek(target.inode))) === 'secret') {
    run.tree.leaveOut(parts, rawName, 'secret', target.inode.content.size);
    return;
  }
  if (!target) throw new AwcError('E_FORMAT', `hardlink ${JSON.stringify(rawName)} names an unknown entry ${JSON.stringify(targetName)}`);
  if (target.kind === 'dir') throw new AwcError('E_FORMAT', `hardlink ${JSON.stringify(rawName)} names a directory`);
  if (target.kind === 'file') {
    run.tree.place(parts, rawName, { kind: 'file', inode: target.inode });
    return;
  }
  run.opts.onWarning?.({
    code: 'W_HARDLINK_COPIED',
    path: parts.join('/'),
    message: `a hardlink to a ${target.entry.type} is recorded as an independent copy`,
  });
  run.tree.place(parts, rawName, { kind: 'leaf', entry: { ...target.entry, name: parts[parts.length - 1] } });
}

/**
 * Writes the tree bottom-up; visiting entries in depth-first sorted order makes the first name
 * of a hardlinked file the `file` entry whatever the archive's order was.
 * @returns the import's result (root digest, files and bytes counted once per inode)
 */
async function writeTarTree(writer: ContentWriter, root: DirNode): Promise<ImportResult> {
  const firstPath = new Map<Inode, string>();
  const counts = { fileCount: 0, byteCount: 0 };
  const fileEntry = (name: string, path: string, inode: Inode): Entry => {
    const first = firstPath.get(inode);
    if (first !== undefined) return { type: 'hardlink', name, target: first };
    firstPath.set(inode, path);
    const c = inode.content;
    counts.fileCount++;
    counts.byteCount += c.size;
    return { type: 'file', name, ...inode.attrs, size: c.size, digest: c.digest, chunks: c.chunks, ...sparseOf(c.extents) };
  };
  const writeDir = async (dir: DirNode, rel: string): Promise<Digest> => {
    const entries: Entry[] = [];
    for (const name of [...dir.children.keys()].sort(compareNames)) {
      const node = dir.children.get(name)!;
      const path = rel === '' ? name : `${rel}/${name}`;
      if (node.kind === 'dir') entries.push({ type: 'dir', name, ...node.attrs, tree: await writeDir(node, path) });
      else if (node.kind === 'file') entries.push(fileEntry(name, path, node.inode));
      else entries.push(node.entry);
    }
    return writer.writeTree(entries);
  };
  const tree = await writeDir(root, '');
  const rootDigest = await writer.writeRoot({ ...root.attrs, tree });
  return { root: rootDigest, ...counts, skipped: [] };
}

/** Attributes of an entry from its header and pax records. */
function paxAttrs(header: TarHeader, pax: Map<string, Buffer>, text: (key: string) => string | undefined, rawName: string): EntryAttrs {
  const int = (key: string, fallback: number | undefined): number => {
    const v = text(key);
    if (v === undefined) return fallback ?? 0;
    if (!/^\d+$/.test(v)) throw new AwcError('E_FORMAT', `tar entry ${JSON.stringify(rawName)}: malformed pax ${key} ${JSON.stringify(v)}`);
    return Number(v);
  };
  const paxMtime = text('mtime');
  const mtimeNs =
    paxMtime !== undefined
      ? paxTimeToNs(paxMtime)
      : (BigInt(Math.round((header.mtime?.getTime() ?? 0) / 1000)) * 1_000_000_000n).toString();
  const attrs: EntryAttrs = { mode: (header.mode ?? 0) & 0o7777, uid: int('uid', header.uid), gid: int('gid', header.gid), mtimeNs };
  let xattrs: Record<string, string> | undefined;
  const record = (name: string, value: Buffer): void => {
    if (classifyXattr(name) === 'keep') (xattrs ??= {})[name] = value.toString('base64');
  };
  for (const [key, value] of pax) {
    if (key.startsWith('LIBARCHIVE.xattr.')) {
      const name = decodeURIComponent(key.slice('LIBARCHIVE.xattr.'.length));
      if (!pax.has(`SCHILY.xattr.${name}`)) record(name, Buffer.from(value.toString('latin1'), 'base64'));
    } else if (key.startsWith('SCHILY.xattr.')) {
      record(key.slice('SCHILY.xattr.'.length), value);
    }
  }
  if (xattrs) attrs.xattrs = xattrs;
  return attrs;
}

/** Opens a tar file for reading, gunzipping it when it starts with the gzip magic. */
export async function openTarFile(path: string): Promise<NodeJS.ReadableStream> {
  try {
    const st = await stat(path);
    if (!st.isFile() && !st.isFIFO()) throw new AwcError('E_SOURCE_NOT_FOUND', `not a tar file: ${path}`);
    let gzip = false;
    if (st.isFile()) {
      const fh = await open(path, 'r');
      try {
        const { bytesRead, buffer } = await fh.read(Buffer.alloc(2), 0, 2, 0);
        gzip = bytesRead === 2 && buffer[0] === 0x1f && buffer[1] === 0x8b;
      } finally {
        await fh.close();
      }
    }
    const file = createReadStream(path);
    if (!gzip) return file;
    const gunzip = createGunzip();
    file.on('error', (err) => gunzip.destroy(err));
    return file.pipe(gunzip);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw new AwcError('E_SOURCE_NOT_FOUND', `no such file: ${path}`);
    throw toAwcError(err);
  }
}

/** Reads a stream to its end, discarding it; returns the bytes read. */
async function drain(entry: AsyncIterable<unknown>): Promise<number> {
  let n = 0;
  for await (const b of entry) n += (b as Buffer).length ?? 0;
  return n;
}

/**
 * Reads the first `max` bytes of a stream (or all of a shorter one): `peek(n)` gives the first
 * `n` of them (default 64 KiB), `rest` the whole stream again from its start.
 */
async function takeHead(src: AsyncIterable<Buffer>, max: number): Promise<{ peek: (n?: number) => Buffer; rest: AsyncIterable<Buffer> }> {
  const it = src[Symbol.asyncIterator]();
  const first: Buffer[] = [];
  let n = 0;
  let done = false;
  while (n < max) {
    const r = await it.next();
    if (r.done) {
      done = true;
      break;
    }
    first.push(r.value);
    n += r.value.length;
  }
  async function* rest(): AsyncIterable<Buffer> {
    yield* first;
    if (done) return;
    for (let r = await it.next(); !r.done; r = await it.next()) yield r.value;
  }
  let head: Buffer | undefined;
  const peek = (n = 64 * 1024): Buffer => (head ??= Buffer.concat(first)).subarray(0, Math.min(n, max));
  return { peek, rest: rest() };
}

/** The hint of a malformed archive's E_FORMAT (the registry's default, "upgrade awc", fits objects of the store, not a user's tar). */
const TAR_FORMAT_HINT =
  'The archive is damaged or incomplete (cut short, not tar, a corrupt gzip stream); check it with `tar -tvf <file>`, then make it again.';

/** tar-stream and zlib report corrupt input as plain Errors: give them a code (E_FORMAT of the archive gets TAR_FORMAT_HINT). */
export function tarError(err: unknown): AwcError {
  const format = (message: string, cause: unknown, details?: Record<string, unknown>): AwcError =>
    new AwcError('E_FORMAT', message, { cause, hint: TAR_FORMAT_HINT, details });
  if (err instanceof AwcError)
    return err.code === 'E_FORMAT' && err.hint === ERROR_CODES.E_FORMAT.hint ? format(err.message, err, err.details) : err;
  const e = err as NodeJS.ErrnoException;
  if (e && !e.code && typeof e.message === 'string' && /tar|header|unexpected end|size mismatch/i.test(e.message))
    return format(`not a readable tar archive: ${e.message}`, err);
  if (e?.code?.startsWith('Z_')) return format(`corrupt gzip stream: ${e.message}`, err);
  return toAwcError(err);
}

/** True when the file starts like a tar archive (ustar magic at 257) or a gzip stream. */
export function looksLikeTar(path: string): boolean {
  const fd = openSync(path, 'r');
  try {
    const b = Buffer.alloc(512);
    const n = readSync(fd, b, 0, 512, 0);
    if (n >= 2 && b[0] === 0x1f && b[1] === 0x8b) return true;
    return n === 512 && b.subarray(257, 262).toString('latin1') === 'ustar';
  } finally {
    closeSync(fd);
  }
}
