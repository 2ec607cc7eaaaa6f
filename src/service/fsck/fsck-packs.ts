import { createHash } from 'node:crypto';
import type { GcCatalog, GcPack } from '../../catalog/port/gc-catalog.js';
import type { Digest } from '../../core/digest.js';
import { AwcError, toAwcError } from '../../core/errors.js';
import { Semaphore } from '../../core/semaphore.js';
import type { ObjectStore } from '../../store/object/object-store.js';
import { decodeBlob, PACK_FOOTER_SIZE, packKeyHex, parsePackFooter, parsePackIndex } from '../../store/pack/pack.js';
import type { BlobLocation, PackIndexEntry } from '../../store/pack/pack-types.js';
import type { FsckProblem } from './fsck-report.js';

/** What the check of one pack found. */
export interface PackCheck {
  pack: GcPack;
  /** The entries of the pack's own index, when it could be read. */
  entries?: PackIndexEntry[];
  /** The pack cannot serve reads at all: its object is missing or has another size (then nothing else is checked). */
  broken: boolean;
  /** Its object is not in the store. */
  missing: boolean;
  /** Digests of blobs in it that failed to decode (`--read-data`). */
  badBlobs: Set<Digest>;
  /** Digests whose catalog row names this pack but disagrees with its index. */
  mismatched: Set<Digest>;
  /** Every byte of the pack was read (`--read-data`). */
  read: boolean;
}

/** Inputs of {@link checkPacks}. */
export interface CheckPacksInput {
  store: ObjectStore;
  gc: GcCatalog;
  /** The pack rows to check (live and condemned ones). */
  packs: readonly GcPack[];
  /** The store's listing: key → size in bytes. */
  stored: ReadonlyMap<string, number>;
  /** Keys of the packs to read whole (`--read-data`, `--subset`). */
  readWhole: ReadonlySet<string>;
  problems: FsckProblem[];
  /** Packs checked at a time (default 4). */
  concurrency?: number;
}

const same = (a: PackIndexEntry, b: BlobLocation): boolean =>
  a.kind === b.kind && a.codec === b.codec && a.offset === b.offset && a.storedLength === b.storedLength && a.rawLength === b.rawLength;

/**
 * `entries`, when no digest appears twice (docs/reference/formats.md: a digest appears at most
 * once in a pack; rows could not say which copy they mean).
 * @throws E_FORMAT naming the first digest listed twice
 */
function once(entries: PackIndexEntry[]): PackIndexEntry[] {
  const seen = new Set<Digest>();
  for (const e of entries) {
    if (seen.has(e.digest)) throw new AwcError('E_FORMAT', `its index lists blob ${e.digest} twice`);
    seen.add(e.digest);
  }
  return entries;
}

/**
 * Checks each pack row against the object store (docs/reference/fsck.md): the
 * object exists with the recorded size, its own index parses and passes its checksum
 * (`parsePackIndex`), and every catalog blob row naming it agrees with that index. A pack of
 * `readWhole` is read whole instead: its bytes must hash to its key and every blob must decode
 * to its digest (restic's `check --read-data`). Problems are appended to `input.problems`
 * (without snapshots: the caller attributes them).
 * @returns pack key → what was found. @throws what the catalog throws (a store error on one pack is a problem of that pack)
 */
export async function checkPacks(input: CheckPacksInput): Promise<Map<string, PackCheck>> {
  const out = new Map<string, PackCheck>();
  const limit = new Semaphore(input.concurrency ?? 4);
  await Promise.all(
    input.packs.map(async (p) => {
      const wait = limit.acquire();
      if (wait) await wait;
      try {
        await checkPack(input, p, out);
      } finally {
        limit.release();
      }
    }),
  );
  return out;
}

/** Appends a problem of pack `p` (and of blob `digest` in it) to `problems`, without snapshots. */
function packProblem(
  problems: FsckProblem[],
  p: GcPack,
  kind: FsckProblem['kind'],
  err: AwcError | { code: FsckProblem['code']; message: string },
  digest?: Digest,
): void {
  problems.push({
    kind,
    code: err.code,
    message: err.message,
    namespace: p.namespace,
    key: p.key,
    ...(digest ? { digest } : {}),
    snapshots: [],
  });
}

/** Checks one pack (see checkPacks) into `out`. */
async function checkPack(input: CheckPacksInput, p: GcPack, out: Map<string, PackCheck>): Promise<void> {
  const { store, problems } = input;
  const c: PackCheck = { pack: p, broken: false, missing: false, badBlobs: new Set(), mismatched: new Set(), read: false };
  out.set(p.key, c);
  let size = input.stored.get(p.key);
  if (size === undefined && (await store.has(p.key))) size = await store.size(p.key);
  if (size === undefined) {
    c.broken = c.missing = true;
    return packProblem(problems, p, 'pack-missing', { code: 'E_OBJECT_NOT_FOUND', message: `pack ${p.key} is not in the object store` });
  }
  if (size !== p.size) {
    c.broken = true;
    return packProblem(problems, p, 'pack-size', {
      code: 'E_INTEGRITY',
      message: `pack ${p.key} has ${size} bytes; its catalog row says ${p.size}`,
    });
  }
  try {
    c.entries = input.readWhole.has(p.key) ? await readWholePack(input, c) : await readPackIndexOf(store, p.key, size);
  } catch (err) {
    const e = toAwcError(err);
    if (e.code !== 'E_FORMAT' && e.code !== 'E_INTEGRITY' && e.code !== 'E_OBJECT_NOT_FOUND') throw e;
    packProblem(problems, p, 'pack-index', { code: e.code, message: `pack ${p.key}: its own index cannot be read: ${e.message}` });
  }
  if (c.entries) await compareRows(input, c, c.entries);
}

/** Reads pack `c.pack` whole: its bytes must hash to its key and every blob decode to its digest. @returns its index entries */
async function readWholePack(input: CheckPacksInput, c: PackCheck): Promise<PackIndexEntry[]> {
  const p = c.pack;
  const bytes = await input.store.get(p.key);
  c.read = true;
  const hex = createHash('sha256').update(bytes).digest('hex');
  if (hex !== packKeyHex(p.key))
    packProblem(input.problems, p, 'pack-digest', {
      code: 'E_INTEGRITY',
      message: `pack ${p.key}: its bytes hash to ${hex}, not to its key`,
    });
  const entries = once(parsePackIndex(bytes));
  for (const e of entries) {
    try {
      decodeBlob(bytes.subarray(e.offset, e.offset + e.storedLength), e);
    } catch (err) {
      c.badBlobs.add(e.digest);
      packProblem(input.problems, p, 'blob-corrupt', toAwcError(err), e.digest);
    }
  }
  return entries;
}

/** Reads only the footer and index of pack `key` (`size` bytes). @throws E_FORMAT / E_INTEGRITY (a bad index), E_OBJECT_NOT_FOUND */
async function readPackIndexOf(store: ObjectStore, key: string, size: number): Promise<PackIndexEntry[]> {
  const tail = await store.get(key, { offset: Math.max(0, size - PACK_FOOTER_SIZE), length: PACK_FOOTER_SIZE });
  const { indexLength } = parsePackFooter(tail);
  const start = size - PACK_FOOTER_SIZE - indexLength;
  if (start < 0) throw new AwcError('E_FORMAT', `pack ${key}: its index (${indexLength} bytes) does not fit in ${size} bytes`);
  const ix = await store.get(key, { offset: start, length: indexLength + PACK_FOOTER_SIZE });
  return once(parsePackIndex(ix, { packSize: size }));
}

/** Every catalog blob row naming pack `c.pack` must agree with its index `entries` (else index-mismatch). */
async function compareRows(input: CheckPacksInput, c: PackCheck, entries: readonly PackIndexEntry[]): Promise<void> {
  const p = c.pack;
  const byDigest = new Map(entries.map((e) => [e.digest, e]));
  for (const row of await input.gc.listPackBlobs(p.key)) {
    const e = byDigest.get(row.digest);
    if (e && same(e, row)) continue;
    c.mismatched.add(row.digest);
    const what = e ? `at offset ${e.offset} (${e.storedLength} bytes), not ${row.offset} (${row.storedLength})` : 'not in it';
    packProblem(
      input.problems,
      p,
      'index-mismatch',
      { code: 'E_INTEGRITY', message: `blob ${row.digest}: its row names pack ${p.key}, whose index has it ${what}` },
      row.digest,
    );
  }
}
