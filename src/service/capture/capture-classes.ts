import type { CaptureDirFilter, CaptureFilter } from '../../core/capture-filter.js';
import type { Digest } from '../../core/digest.js';
import { AwcError } from '../../core/errors.js';
import type { DirFd } from '../../core/dir-fd.js';
import type { FileEntry, TreeObject } from '../../core/tree.js';
import { nameFromBytes } from '../../core/raw-name.js';
import type { ContentReader } from '../../store/content/content-reader.js';
import { CapturePolicy, PROJECT_FILE, parseProjectConfig, type CapturePolicyOptions, type PolicyDir } from './capture-policy.js';
import type { TreeCounts } from './tree-stats.js';
import { addStoredCounts, diffClasses, zeroStoredCounts, type StoredClassCounts } from './class-delta.js';
import { policyKey, type ClassCountCache } from './class-cache.js';
import type { SnapshotClassCounts } from '../../catalog/port/catalog.js';

/** What a capture left out: secrets (kept on the host, never stored) and scratch (dropped). */
export interface CaptureReport {
  /** Secret files not stored, by slash path from the root, with their size in bytes. */
  secrets: { path: string; size: number }[];
  /** Scratch paths dropped, with the regular files and bytes under them. */
  dropped: { path: string; files: number; bytes: number }[];
}

/** Files and bytes per class of a checkpoint (docs/explanation/capture-classes.md). */
export interface ClassCounts {
  /** Stored: tracked and untracked-not-ignored files. */
  durable: TreeCounts;
  /** Stored: ignored paths a preset names (node_modules/, .venv/, …). */
  reconstructible: TreeCounts;
  /** Stored: ignored paths in no class (nothing is lost by default). */
  ignored: TreeCounts;
  /** Dropped, never stored. */
  scratch: TreeCounts;
  /** Left out by the secret filter, never stored (they stay on the host). */
  secret: TreeCounts;
}

/**
 * The CaptureFilter of one walk (a scan or an import): the policy of the walk's
 * `.awc.json`, and the report of what it left out. `keep` (a remove's keeping pass) gets
 * every secret's open descriptor to copy it before the walker closes it.
 */
export class CaptureRecorder implements CaptureFilter {
  readonly report: CaptureReport = { secrets: [], dropped: [] };
  private policy: CapturePolicy | undefined;

  constructor(
    private readonly reader: ContentReader,
    private readonly opts: CapturePolicyOptions & {
      keep?: (rel: string, fd: number, size: number) => void;
    },
  ) {}

  async root(read: (name: '.gitignore' | '.awc.json') => Promise<string | undefined>): Promise<CaptureDirFilter> {
    this.policy = new CapturePolicy(parseProjectConfig(await read(PROJECT_FILE)), this.opts);
    return this.policy.root(await read('.gitignore'));
  }

  verdictsKey(): string | undefined {
    return this.policy?.verdictsKey();
  }

  /** The root filter of the walk that ran (for classOf), or undefined before `root`. */
  get rootPolicy(): CapturePolicy | undefined {
    return this.policy;
  }

  /** @throws E_INTERNAL when a walk that must keep its secrets (`keep`) reports one without a descriptor */
  secret(rel: string, fd: number | undefined, size: number): void {
    this.report.secrets.push({ path: rel, size });
    if (!this.opts.keep) return;
    if (fd === undefined) throw new AwcError('E_INTERNAL', `secret ${rel} reported without a descriptor to keep it from`);
    this.opts.keep(rel, fd, size);
  }

  scratch(rel: string, what: { dir: DirFd } | { size: number }): void {
    const c = 'dir' in what ? duDir(what.dir) : { files: 1, bytes: what.size };
    this.report.dropped.push({ path: 'dir' in what ? `${rel}/` : rel, ...c });
  }

  async readStored(entry: FileEntry): Promise<Buffer> {
    const parts: Buffer[] = [];
    for await (const b of this.reader.readFile(entry)) parts.push(b);
    return Buffer.concat(parts);
  }
}

/** Regular files and bytes under an open directory (lstat only, never following a symlink). */
function duDir(d: DirFd): TreeCounts {
  const c: TreeCounts = { files: 0, bytes: 0 };
  for (const name of d.list().map(nameFromBytes)) {
    const st = d.lstat(name);
    if (st?.isFile()) {
      c.files++;
      c.bytes += Number(st.size);
    } else if (st?.isDirectory()) {
      const f = d.open(name, st);
      if (f?.type !== 'dir') continue;
      try {
        const s = duDir(f.dir);
        c.files += s.files;
        c.bytes += s.bytes;
      } finally {
        f.dir.close();
      }
    }
  }
  return c;
}

/**
 * Counts a snapshot's stored files per class by walking its whole tree with the policy
 * (reading the tree's own `.gitignore` files). Subtrees inside an ignored directory are
 * counted whole (memoised by tree digest). Cost: O(tree); storedClasses avoids it.
 */
export async function countStoredClasses(reader: ContentReader, root: Digest, policy: CapturePolicy): Promise<StoredClassCounts> {
  const out = zeroStoredCounts();
  const textOf = async (t: TreeObject): Promise<string | undefined> => {
    const e = t.entries.find((x) => x.name === '.gitignore');
    if (e?.type !== 'file') return undefined;
    const parts: Buffer[] = [];
    for await (const b of reader.readFile(e)) parts.push(b);
    return Buffer.concat(parts).toString('utf8');
  };
  // breadth first, one batched read per level (ContentReader.readTrees: one index lookup per
  // batch, neighbouring trees of a pack in one ranged read); a directory's policy is made once
  // its own tree (and so its .gitignore) is read
  const r = await reader.readRoot(root);
  let level: { tree: Digest; dir: (t: TreeObject) => Promise<PolicyDir> }[] = [
    { tree: r.tree, dir: async (t) => policy.root(await textOf(t)) },
  ];
  while (level.length > 0) {
    const trees = await reader.readTrees(level.map((x) => x.tree));
    const next: typeof level = [];
    for (let i = 0; i < level.length; i++) {
      const t = trees[i]!;
      const dir = await level[i]!.dir(t);
      for (const e of t.entries) {
        if (e.type === 'file') {
          const c = out[dir.classOf(e.name, false)];
          c.files++;
          c.bytes += e.size;
        } else if (e.type === 'dir') next.push({ tree: e.tree, dir: (sub) => dir.child(e.name, () => textOf(sub)) });
      }
    }
    level = next;
  }
  return out;
}

/** A snapshot the counts of another are made from: its root and, when recorded in the catalog, its counts. */
export interface PriorClasses {
  root: Digest;
  /** Its counts as the catalog recorded them (asked only when the cache does not hold the root). */
  classes?: () => Promise<SnapshotClassCounts | undefined>;
}

/**
 * A snapshot's stored files per class, at the cost of what changed: from `cache` when it
 * holds `root`; else from `prior` (the head the snapshot was made from: its counts from the
 * catalog or the cache, else counted whole once, returned as `prior` for the caller to
 * record) plus diffClasses(prior, root); else a whole walk (countStoredClasses). Counts carry
 * the policy's key and are recorded in `cache`.
 */
export async function storedClasses(
  reader: ContentReader,
  root: Digest,
  policy: CapturePolicy,
  opts: { cache?: ClassCountCache; prior?: PriorClasses } = {},
): Promise<{ stored: SnapshotClassCounts; prior?: SnapshotClassCounts }> {
  const { cache, prior } = opts;
  const key = policyKey(policy);
  const hit = await cache?.get(root, key);
  if (hit) return { stored: { key, ...hit } };
  const recorded = await prior?.classes?.();
  const known = recorded?.key === key ? recorded : undefined;
  if (!prior || prior.root === root) return { stored: await counted(reader, root, policy, known, cache) };
  const fromCache = known ?? (await cache?.get(prior.root, key));
  const prev = fromCache ?? (await counted(reader, prior.root, policy, undefined, cache));
  const delta = await diffClasses(reader, prior.root, root, policy);
  const out = delta ? addStoredCounts(prev, delta) : undefined;
  const stored = await counted(reader, root, policy, out, cache);
  return { stored, ...(known ? {} : { prior: { ...prev, key } }) };
}

/** `known` (or, without it, a whole count of `root`), recorded in `cache` under the policy's key. */
async function counted(
  reader: ContentReader,
  root: Digest,
  policy: CapturePolicy,
  known: StoredClassCounts | undefined,
  cache: ClassCountCache | undefined,
): Promise<SnapshotClassCounts> {
  const c = known ?? (await countStoredClasses(reader, root, policy));
  const stored = { durable: c.durable, reconstructible: c.reconstructible, ignored: c.ignored };
  await cache?.put(root, policyKey(policy), stored);
  return { key: policyKey(policy), ...stored };
}

/** The counts of what a capture left out (secrets and scratch), from its report. */
export function leftOutCounts(report: CaptureReport): Pick<ClassCounts, 'scratch' | 'secret'> {
  return {
    scratch: { files: report.dropped.reduce((n, d) => n + d.files, 0), bytes: report.dropped.reduce((n, d) => n + d.bytes, 0) },
    secret: { files: report.secrets.length, bytes: report.secrets.reduce((n, s) => n + s.size, 0) },
  };
}

/** What a checkpoint's result says about classes (see CheckpointResult). */
export interface CaptureFields {
  /** Secret files left out (never stored; they stay on the host). */
  secrets: { path: string; size: number }[];
  /** Scratch paths dropped. */
  dropped: { path: string; files: number; bytes: number }[];
  classes: ClassCounts;
}

/**
 * The result fields of a capture whose walk `rec` ran and whose tree is `root`; with a
 * `cache` and the `prior` head, its class counts cost what changed (storedClasses). `stored`
 * (and `prior`, when the head's were counted here) is what the catalog keeps of them.
 */
export async function captureFields(
  reader: ContentReader,
  root: Digest,
  rec: CaptureRecorder,
  opts: { cache?: ClassCountCache; prior?: PriorClasses } = {},
): Promise<{ fields: CaptureFields; stored: SnapshotClassCounts; prior?: SnapshotClassCounts }> {
  const r = await storedClasses(reader, root, policyOf(rec), opts);
  const { key: _key, ...counts } = r.stored;
  return { ...r, fields: { ...rec.report, classes: { ...counts, ...leftOutCounts(rec.report) } } };
}

/** The policy of the walk `rec` ran (its `.awc.json`), or the default one when it ran none. */
export function policyOf(rec: CaptureRecorder): CapturePolicy {
  return rec.rootPolicy ?? new CapturePolicy(parseProjectConfig(undefined), { dropScratch: true });
}
