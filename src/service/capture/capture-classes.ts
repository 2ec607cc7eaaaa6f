import type { CaptureDirFilter, CaptureFilter } from '../../core/capture-filter.js';
import type { Digest } from '../../core/digest.js';
import { AwcError } from '../../core/errors.js';
import type { DirFd } from '../../core/dir-fd.js';
import type { FileEntry } from '../../core/tree.js';
import { nameFromBytes } from '../../core/raw-name.js';
import type { ContentReader } from '../../store/content/content-reader.js';
import { CapturePolicy, PROJECT_FILE, parseProjectConfig, type CapturePolicyOptions, type PolicyDir } from './capture-policy.js';
import { countTree, type TreeCounts } from './tree-stats.js';

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
 * Counts a checkpoint's files per class: the stored ones by walking its tree with the
 * policy (reading the tree's own `.gitignore` files), the left-out ones from `report`.
 * Subtrees inside an ignored directory are counted whole (memoised by tree digest).
 */
export async function countClasses(
  reader: ContentReader,
  root: Digest,
  policy: CapturePolicy,
  report: CaptureReport,
): Promise<ClassCounts> {
  const out: ClassCounts = {
    durable: { files: 0, bytes: 0 },
    reconstructible: { files: 0, bytes: 0 },
    ignored: { files: 0, bytes: 0 },
    scratch: { files: report.dropped.reduce((n, d) => n + d.files, 0), bytes: report.dropped.reduce((n, d) => n + d.bytes, 0) },
    secret: { files: report.secrets.length, bytes: report.secrets.reduce((n, s) => n + s.size, 0) },
  };
  const memo = new Map<Digest, TreeCounts>();
  const textOf = async (e: FileEntry | undefined): Promise<string | undefined> => {
    if (!e) return undefined;
    const parts: Buffer[] = [];
    for await (const b of reader.readFile(e)) parts.push(b);
    return Buffer.concat(parts).toString('utf8');
  };
  const fileNamed = async (tree: Digest, name: string): Promise<FileEntry | undefined> => {
    const e = (await reader.readTree(tree)).entries.find((x) => x.name === name);
    return e?.type === 'file' ? e : undefined;
  };
  const walk = async (tree: Digest, dir: PolicyDir): Promise<void> => {
    for (const e of (await reader.readTree(tree)).entries) {
      if (e.type === 'file') {
        const c = out[dir.classOf(e.name, false)];
        c.files++;
        c.bytes += e.size;
      } else if (e.type === 'dir') {
        const cls = dir.classOf(e.name, true);
        if (cls !== 'durable') {
          const s = await countTree(reader, e.tree, memo);
          out[cls].files += s.files;
          out[cls].bytes += s.bytes;
        } else await walk(e.tree, await dir.child(e.name, async () => textOf(await fileNamed(e.tree, '.gitignore'))));
      }
    }
  };
  const r = await reader.readRoot(root);
  await walk(r.tree, policy.root(await textOf(await fileNamed(r.tree, '.gitignore'))));
  return out;
}

/** What a checkpoint's result says about classes (see CheckpointResult). */
export interface CaptureFields {
  /** Secret files left out (never stored; they stay on the host). */
  secrets: { path: string; size: number }[];
  /** Scratch paths dropped. */
  dropped: { path: string; files: number; bytes: number }[];
  classes: ClassCounts;
}

/** The result fields of a capture whose walk `rec` ran and whose tree is `root`. */
export async function captureFields(reader: ContentReader, root: Digest, rec: CaptureRecorder): Promise<CaptureFields> {
  const policy = rec.rootPolicy ?? new CapturePolicy(parseProjectConfig(undefined), { dropScratch: true });
  return { ...rec.report, classes: await countClasses(reader, root, policy, rec.report) };
}
