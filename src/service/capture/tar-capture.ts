import type * as TarStream from 'tar-stream';
import { lazyRequire } from '../../core/lazy-require.js';
import type { CaptureDirFilter, CaptureFilter, CaptureVerdict } from '../../core/capture-filter.js';
import { SMALL_FILE_BYTES } from '../../core/small-file.js';
import { compareNames } from '../../core/tree.js';
import { PROJECT_FILE } from './capture-policy.js';

/** tar-stream, loaded when a tar is first read (docs/explanation/cli-latency.md). */
const tarStream = lazyRequire<typeof TarStream>('tar-stream');

/** The project files of a tar archive (what its capture policy is made of), read by a first pass over it. */
export interface TarProjectFiles {
  /** The text of `.awc.json` at the archive's root (undefined: none). */
  project?: string;
  /** The text of each `.gitignore`, by the slash path of its directory ('' for the root). */
  gitignores: Map<string, string>;
}

/**
 * Reads the project files of a tar archive in a first pass: headers, and the content of
 * `.awc.json` at the root and of `.gitignore` files (up to SMALL_FILE_BYTES each); every
 * other entry's content is read past and discarded. As tar extraction does, a later entry
 * for the same path replaces the earlier one (a non-file there means none). Paths are
 * normalised as the importer does (`../` and `.` components dropped); the importer's second
 * pass checks them. A first pass is needed because an archive may hold `.awc.json` after
 * the files it opts in or out (docs/explanation/capture-classes.md#tar-imports).
 * @param open opens the archive (a fresh stream, gunzipped when it needs to be)
 * @throws what `open` throws, and the tar parser's errors (mapped by the caller)
 */
export async function readTarProjectFiles(open: () => Promise<NodeJS.ReadableStream>): Promise<TarProjectFiles> {
  const out: TarProjectFiles = { gitignores: new Map() };
  const source = await open();
  const ex = tarStream().extract();
  source.on('error', (err: Error) => ex.destroy(err));
  source.pipe(ex as unknown as NodeJS.WritableStream);
  try {
    for await (const entry of ex) {
      const parts = entry.header.name.split('/').filter((p) => p !== '' && p !== '.');
      const name = parts.at(-1);
      const dir = parts.slice(0, -1).join('/');
      const wanted = (name === PROJECT_FILE && parts.length === 1) || name === '.gitignore';
      const isFile = entry.header.type === 'file' || entry.header.type === 'contiguous-file';
      let text: string | undefined;
      if (wanted && isFile && (entry.header.size ?? 0) <= SMALL_FILE_BYTES) {
        const bufs: Buffer[] = [];
        for await (const b of entry as AsyncIterable<Buffer>) bufs.push(b);
        text = Buffer.concat(bufs).toString('utf8');
      } else for await (const _ of entry as AsyncIterable<unknown>); // read past it
      if (!wanted) continue;
      if (name === PROJECT_FILE && parts.length === 1) out.project = text;
      else if (text === undefined) out.gitignores.delete(dir);
      else out.gitignores.set(dir, text);
    }
  } catch (err) {
    ex.destroy();
    (source as NodeJS.ReadableStream & { destroy?(): void }).destroy?.();
    throw err;
  }
  return out;
}

/**
 * The capture filter of one tar import, applied entry by entry in the archive's order
 * (docs/explanation/capture-classes.md#tar-imports): the verdict of a path comes from the
 * filter of its directory, made top-down from the root (with the archive's `.awc.json` and
 * `.gitignore` files, see readTarProjectFiles) and memoised per directory. What it leaves
 * out is reported to the walk's CaptureFilter by `finish`, in tree order, as the archive
 * ends up: a later entry at a left-out path takes it back (`stored`).
 */
export class TarCapture {
  private readonly dirs = new Map<string, Promise<CaptureDirFilter>>();
  private readonly secrets = new Map<string, number>();
  private readonly scratch = new Map<string, number>();

  constructor(
    private readonly filter: CaptureFilter,
    private readonly files: TarProjectFiles,
  ) {}

  /**
   * The verdict for the regular file at `parts` (non-empty); `peek` gives its first bytes. A
   * tar holds no base: `base` drops the file as scratch. @throws E_CONFIG (a bad `.awc.json`)
   */
  async verdict(parts: readonly string[], peek: (max?: number) => Buffer): Promise<Exclude<CaptureVerdict, 'base'>> {
    const dir = await this.dirFilter(parts.slice(0, -1));
    const v = dir.verdict(parts[parts.length - 1], false, peek);
    return v === 'base' ? 'scratch' : v;
  }

  /** The size of the file a secret verdict left out at slash path `rel`, or undefined. */
  secretSize(rel: string): number | undefined {
    return this.secrets.get(rel);
  }

  /** Records that the file at `rel` (`size` bytes) was left out by `verdict`. */
  leftOut(rel: string, verdict: Exclude<CaptureVerdict, 'store'>, size: number): void {
    (verdict === 'secret' ? this.secrets : this.scratch).set(rel, size);
  }

  /** A later entry stored at `rel`: whatever was left out there before is no longer in the archive's result. */
  stored(rel: string): void {
    this.secrets.delete(rel);
    this.scratch.delete(rel);
  }

  /** Reports what was left out to the walk's CaptureFilter (no descriptor: a tar entry is a stream, nothing to keep). */
  finish(): void {
    const sorted = (m: Map<string, number>): [string, number][] => [...m].sort(([a], [b]) => compareNames(a, b));
    for (const [rel, size] of sorted(this.secrets)) this.filter.secret(rel, undefined, size);
    for (const [rel, size] of sorted(this.scratch)) this.filter.scratch(rel, { size });
  }

  private dirFilter(parts: readonly string[]): Promise<CaptureDirFilter> {
    const key = parts.join('/');
    let f = this.dirs.get(key);
    if (!f) {
      f =
        parts.length === 0
          ? this.filter.root(async (n) => (n === PROJECT_FILE ? this.files.project : this.files.gitignores.get('')))
          : this.dirFilter(parts.slice(0, -1)).then((p) => p.child(parts[parts.length - 1], async () => this.files.gitignores.get(key)));
      this.dirs.set(key, f);
    }
    return f;
  }
}
