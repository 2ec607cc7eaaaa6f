import type { Digest } from '../../core/digest.js';
import { AwcError } from '../../core/errors.js';
import { decodeBlob } from '../../store/pack/pack.js';
import type { PackIndex } from '../../store/pack/pack-index.js';
import { PackIndexCache, type PackSlot } from '../../store/pack/pack-index-cache.js';
import type { BlobIndex, BlobLocation } from '../../store/pack/pack-types.js';
import type { BlobRange, RangePlanner } from '../../store/pack/range-plan.js';
import type { ChunkCache } from './chunk-cache.js';

/** Default first read-ahead window of a stream (512 KiB; never more than the largest window). */
export const DEFAULT_READ_AHEAD_MIN_BYTES = 512 * 1024;
/** Read streams remembered per pack. */
const STREAMS_PER_PACK = 8;
/** Read-ahead triggers remembered (chunks whose first hit starts the next window). */
const MAX_TRIGGERS = 1024;
/**
 * Stored bytes of read-ahead chunks decoded and verified per event-loop turn (256 KiB, about
 * 0.5 ms): a window of 8 MiB is kept in slices, so requests arriving meanwhile are answered
 * between slices instead of waiting ~15 ms behind the whole window.
 */
const KEEP_SLICE_BYTES = 256 * 1024;
/**
 * At most this long (ms) after a window's bytes are here, requests past its middle wait for
 * the next window to be arranged (the pack's index read); then they are served regardless.
 */
const PLAN_WAIT_MS = 1000;

/** A read of a pack in flight with read-ahead: requests for blobs inside wait for it. */
interface Window {
  start: number;
  /** End of the bytes read; cut back to the window's last whole blob once the pack's index is known. */
  end: number;
  /** Settles once the bytes are here, with them (`span` set), or with undefined when the read failed. */
  arrived: Promise<Buffer | undefined>;
  /** The bytes read, while the window's chunks are being kept (then the window is gone). */
  span?: Buffer;
  /**
   * True once the read of the next window is arranged (its trigger registered) or known not
   * to be wanted; `whenPlanned` settles then. Readers past the window's middle wait for it, so
   * that the reader who gets there first always starts the next window in the background.
   */
  planned: boolean;
  whenPlanned: Promise<void>;
  /** Settles once the window is gone (no longer in its pack's `windows`). */
  gone: Promise<void>;
}

/** Read-ahead state of one pack (beside its index, in the pack index cache). */
interface AheadState {
  /** Where recent windows ended (`next`) and how big the next window of that stream is. */
  streams: { next: number; size: number }[];
  /** Windows being read. */
  windows: Window[];
}

type Slot = PackSlot<AheadState>;

/** A missing chunk waiting for the fetcher's next plan (`loc` when already located). */
export interface Want {
  digest: Digest;
  index: BlobIndex;
  loc?: BlobLocation;
  /** True once it was looked up again after its pack was gone (a want is relocated at most once). */
  relocated?: boolean;
  resolve(b: Buffer): void;
  reject(e: unknown): void;
}

/** A located missing chunk. */
export interface WantAt {
  loc: BlobLocation;
  want: Want;
}

/** One planned ranged read: [start, end) of a pack and the blobs asked for in it, by offset. */
export type Group = BlobRange<WantAt>;

/** The counters a read-ahead adds to (monotonic; part of ChunkFetcherStats). */
export interface ReadAheadStats {
  /** Reads that went on past the blobs asked for (read-ahead windows). */
  readAheadWindows: number;
  /** Of those, windows read in the background, before any miss, for a reader half way through the previous one. */
  readAheadAsync: number;
  /** Chunks read ahead: decoded, verified and kept in memory before anyone asked for them. */
  readAheadChunks: number;
  /** Raw bytes of those chunks. */
  readAheadBytes: number;
  /** Read-ahead chunks that failed verification: dropped, never served (a request refetches them). */
  readAheadDropped: number;
}

/** The events a read-ahead reports through its source (a subset of ChunkFetcherEvents, the same payloads). */
export type ReadAheadEvents = {
  /** A request joined a window in flight (`key`: `pack@start+length`). */
  join: [{ kind: 'window'; key: string }];
  /** A chunk read ahead was verified and kept in memory (raw `bytes`). */
  fetch: [{ digest: Digest; bytes: number; readAhead: true }];
  /** A chunk read ahead failed verification and was dropped. */
  'read-ahead-drop': [{ digest: Digest; pack: string; error: unknown }];
  /** A pack's index is unusable (no read-ahead there for a while). */
  'pack-index-error': [{ pack: string; error: unknown }];
};

/** What a read-ahead needs of the fetcher it widens reads for (ChunkFetcher passes one). */
export interface ReadAheadSource {
  /** The fetcher's chunk cache: which chunks are held already; read-ahead chunks are kept in its memory tier. */
  readonly cache: ChunkCache;
  /** The fetcher's merge limits: whether two blobs share one read, and maxGapBytes. */
  readonly planner: RangePlanner;
  /** The fetcher's live counters; read-ahead adds to these. */
  readonly stats: ReadAheadStats;
  /** Reports an event on the fetcher. */
  emit<K extends keyof ReadAheadEvents>(event: K, ...args: ReadAheadEvents[K]): void;
  /** Size of a pack in bytes. @throws (rejects) as the store does. */
  packSize(pack: string): Promise<number>;
  /**
   * One ranged read of a pack (offset and length in bytes), singleflighted and counted as a
   * backend read; `kind` `'pack-index'` for a pack's tail. @throws (rejects) as the store does.
   */
  readRange(pack: string, offset: number, length: number, kind: 'blobs' | 'pack-index'): Promise<Buffer>;
  /** Decodes, verifies and delivers one asked-for blob from a span read from byte `spanStart` (refetched alone when bad). */
  deliverBlob(want: Want, loc: BlobLocation, span: Buffer, spanStart: number): void;
  /** Queues a want for the fetcher's next plan. */
  requeue(want: Want): void;
}

/** Options of a {@link ReadAhead} (bytes). */
export interface ReadAheadOptions {
  /** The largest window. */
  maxBytes: number;
  /** The first window of a stream; default min(maxBytes, DEFAULT_READ_AHEAD_MIN_BYTES). */
  minBytes?: number;
  /** Most bytes of pack indexes kept in memory; default DEFAULT_PACK_INDEX_BYTES. */
  packIndexBytes?: number;
}

/**
 * Pack read-ahead of the host fetcher (ChunkFetcher with readAheadBytes > 0).
 *
 * Files snapshotted together sit together in packs, so a
 * miss reads a window of the pack: the blobs asked for, then the following blobs, whole, up
 * to the window size from the first one (asked-for blobs up to readAheadBytes apart share a
 * window too). The window of a read stream starts at readAheadMinBytes and doubles each time a
 * reader goes on where the last window ended (a miss at, or within maxGapBytes after, its
 * end), up to readAheadBytes; another miss starts a new stream. Blob boundaries come from
 * the pack's own index, read once per pack from its tail (`store.size`, then one ranged read
 * of the tail, rarely two) and kept in memory (packIndexBytes, least recently used packs
 * out); the first window of a pack is read before its index is known, and a window that
 * reaches the end of the pack brings the index along (no tail read). The blobs asked for are
 * delivered first; then every chunk of the window that is not already held is decoded,
 * verified against its digest and kept in the cache's memory tier (ChunkCache.remember),
 * where a later miss finds it synchronously; the cache writes it to disk once it is asked
 * for. That keeping is done in slices of 256 KiB per event-loop turn, so requests arriving
 * meanwhile are not stuck behind a whole 8 MiB window. A read-ahead chunk that fails
 * verification is dropped (`'read-ahead-drop'`), never served: a request for it reads it
 * again on its own, with the usual refetch. A request for a blob inside a window being read
 * waits for the window's bytes and is then decoded from them at once (`'join'`, kind
 * `'window'`), whether or not the slices have reached it yet. A
 * window stops before blobs another window is reading, and before a run of more than
 * maxGapBytes of chunks already held. The first hit on the chunk half way through a window
 * starts the stream's next window in the background (asynchronous read-ahead), so that a
 * reader going through the pack in order does not wait for it. Read-ahead reads count as backend reads and bytes like
 * any other. The pack index is only used to find blob boundaries and digests: a wrong one
 * costs wasted bytes, never wrong bytes (every kept chunk matches its digest).
 *
 * The feedback loop: {@link trigger} is called by the fetcher on every hit (and every use
 * served elsewhere, ChunkFetcher.noteUse) while triggers are registered.
 */
export class ReadAhead {
  /** Chunks half way through a read-ahead window → where the stream's next window starts (see trigger). */
  readonly triggers = new Map<Digest, { pack: string; at: number }>();
  /** Requests that joined a window in flight. */
  windowJoins = 0;
  private readonly max: number;
  private readonly min: number;
  private readonly packs: PackIndexCache<AheadState>;
  /** Work in flight (windows, index loads), for settled(). */
  private readonly background = new Set<Promise<unknown>>();

  /** @param source what it uses of its fetcher; @param opts window sizes (validated by the fetcher). */
  constructor(
    private readonly source: ReadAheadSource,
    opts: ReadAheadOptions,
  ) {
    this.max = opts.maxBytes;
    this.min = Math.min(opts.maxBytes, opts.minBytes ?? DEFAULT_READ_AHEAD_MIN_BYTES);
    this.packs = new PackIndexCache<AheadState>({
      size: (pack) => source.packSize(pack),
      read: (pack, offset, length) => source.readRange(pack, offset, length, 'pack-index'),
      maxBytes: opts.packIndexBytes,
      create: () => ({ streams: [], windows: [] }),
      busy: (s) => s.windows.length > 0,
      onError: (pack, error) => source.emit('pack-index-error', { pack, error }),
    });
  }

  /** The first window of a stream (bytes). */
  get minBytes(): number {
    return this.min;
  }

  /** Bytes of pack indexes held in memory. */
  get packIndexMemory(): number {
    return this.packs.bytes;
  }

  /** Windows being read and pack indexes being loaded. */
  get pending(): number {
    return this.background.size;
  }

  /** Resolves once the work in flight when called has settled (see pending); never rejects. */
  async settled(): Promise<void> {
    if (this.background.size > 0) await Promise.allSettled([...this.background]);
  }

  /** Plans the reads of one pack's missing blobs (sorted by offset) with read-ahead. */
  plan(pack: string, items: WantAt[]): void {
    const { cache, planner } = this.source;
    const ps = this.packs.slot(pack);
    const windows = ps.state.windows;
    const groups: Group[] = [];
    let g: Group | undefined;
    for (const it of items) {
      const { loc } = it;
      // Read ahead by a window that completed since this chunk was found missing?
      if (cache.has(it.want.digest)) {
        const b = cache.getSync(it.want.digest, { quiet: true });
        if (b) {
          if (this.triggers.size > 0) this.trigger(it.want.digest);
          it.want.resolve(b);
          continue;
        }
      }
      const end = loc.offset + loc.storedLength;
      const w = windows.find((x) => x.start <= loc.offset && end <= x.end);
      if (w) {
        this.joinWindow(w, it.want, loc);
        continue;
      }
      // Blobs asked for up to maxBytes apart share one read (what lies between is read ahead
      // anyway), unless a window in flight lies between them.
      if (
        g &&
        (planner.fits(g, loc) || Math.max(g.end, end) - g.start <= this.max) &&
        !windows.some((x) => x.start < loc.offset && x.end > g!.end)
      ) {
        g.end = Math.max(g.end, end);
        g.items.push(it);
      } else {
        g = { pack, start: loc.offset, end, items: [it] };
        groups.push(g);
      }
    }
    // A window stops where the next one of this plan starts (no byte read twice).
    for (let i = 0; i < groups.length; i++) this.startWindow(ps, groups[i], i + 1 < groups.length ? groups[i + 1].start : Infinity);
  }

  /** A hit on a chunk half way through a read-ahead window: starts the stream's next window now. */
  trigger(digest: Digest): void {
    const t = this.triggers.get(digest);
    if (!t) return;
    this.triggers.delete(digest);
    const ps = this.packs.peek(t.pack);
    if (!ps || !ps.index || ps.state.windows.some((w) => w.start <= t.at && t.at < w.end)) return;
    if (this.startWindow(ps, { pack: t.pack, start: t.at, end: t.at, items: [] }, Infinity)) this.source.stats.readAheadAsync++;
  }

  /**
   * A request for a blob inside a window being read: served from the window's bytes as soon
   * as they are here (without waiting for the rest of the window to be kept), or queued again
   * when the read failed.
   */
  private joinWindow(w: Window, want: Want, loc: BlobLocation): void {
    this.windowJoins++;
    this.source.emit('join', { kind: 'window', key: `${loc.pack}@${w.start}+${w.end - w.start}` });
    // `held`: the window's bytes, kept by a request that waited while the window ended
    const serve = (held?: Buffer): void => {
      const span = w.span ?? held;
      // Past the middle before the next window is arranged (the pack's index still loading):
      // wait for it, so that this reader's arrival starts the next window in the background.
      if (!w.planned && span && loc.offset >= w.start + (span.length >> 1)) {
        void w.whenPlanned.then(() => serve(span));
        return;
      }
      const b = this.source.cache.getSync(want.digest, { quiet: true });
      if (b) {
        if (this.triggers.size > 0) this.trigger(want.digest);
        want.resolve(b);
        return;
      }
      const from = loc.offset - w.start;
      if (span && from >= 0 && from + loc.storedLength <= span.length) {
        this.source.deliverBlob(want, loc, span, w.start);
        if (this.triggers.size > 0) this.trigger(want.digest);
        return;
      }
      // The read failed or came back short: read it on its own once the window is gone
      // (planned while it is still there, the request would only join it again).
      void w.gone.then(() => this.source.requeue({ ...want, loc }));
    };
    if (w.span) serve();
    else void w.arrived.then((span) => serve(span));
  }

  /**
   * Chooses the window of a group (stream size, blob boundaries; never past `limit` nor into
   * a window in flight), registers it and reads it.
   * @returns false when there was nothing to read (a group asking for nothing, whose window would be empty).
   */
  private startWindow(ps: Slot, g: Group, limit: number): boolean {
    const windows = ps.state.windows;
    const stream = this.streamAt(ps, g.start, g.end);
    const index = this.packs.usable(ps);
    for (const w of windows) if (w.start >= g.end && w.start < limit) limit = w.start;
    let end: number;
    if (index) end = this.windowEnd(ps, index, g, Math.min(g.start + stream.size, limit));
    else if (index === null)
      end = g.end; // no index: no read-ahead in this pack for now
    else end = Math.max(g.end, Math.min(g.start + stream.size, limit)); // index not known yet: boundaries found afterwards
    if (end <= g.start) return false;
    stream.next = end;
    let arrive!: (span: Buffer | undefined) => void;
    let leave!: () => void;
    let plan!: () => void;
    const w: Window = {
      start: g.start,
      end,
      arrived: new Promise<Buffer | undefined>((r) => (arrive = r)),
      gone: new Promise<void>((r) => (leave = r)),
      planned: false,
      whenPlanned: new Promise<void>((r) => (plan = r)),
    };
    const planned = (): void => {
      w.planned = true;
      plan();
    };
    windows.push(w);
    if (index === null) planned(); // no index, no next window to arrange
    // The pack's index (needed to read ahead past this window) is read alongside the window,
    // not after it: the trigger for the next window is then ready about when the bytes are.
    if (index === undefined && end > g.end) void this.loadIndex(g.pack, ps);
    // Requests past the middle never wait more than PLAN_WAIT_MS after the bytes are here
    // (an index read that hangs must not hold them).
    let cap: NodeJS.Timeout | undefined;
    void w.arrived.then(() => {
      if (!w.planned) (cap = setTimeout(planned, PLAN_WAIT_MS)).unref();
    });
    const run = this.readWindow(ps, g, w, index, arrive, planned).finally(() => {
      windows.splice(windows.indexOf(w), 1);
      w.span = undefined;
      arrive(undefined);
      planned();
      clearTimeout(cap);
      leave();
    });
    this.track(run);
    return true;
  }

  /** Reads a window: delivers the asked-for blobs, then keeps the other chunks in it. Never rejects. */
  private async readWindow(
    ps: Slot,
    g: Group,
    w: Window,
    index: PackIndex | null | undefined,
    arrive: (span: Buffer) => void,
    planned: () => void,
  ): Promise<void> {
    const length = w.end - w.start;
    let span: Buffer;
    try {
      span = await this.source.readRange(g.pack, w.start, length, 'blobs');
    } catch (err) {
      for (const it of g.items) it.want.reject(err);
      return;
    }
    w.span = span;
    arrive(span);
    for (const { loc, want } of g.items) this.source.deliverBlob(want, loc, span, g.start);
    if (index === null) return;
    // Anything in the span besides the blobs asked for (after them, or between them)?
    let asked = 0;
    for (const it of g.items) asked += it.loc.storedLength;
    if (asked >= span.length) return;
    this.source.stats.readAheadWindows++;
    // An index already here is used without an await: the next window's trigger is then
    // registered before any request that joined this window is served.
    if (index === undefined) index = ps.index !== undefined ? ps.index : await this.loadIndex(g.pack, ps);
    if (!index) return;
    await this.keepAhead(ps, g, w, index, span, planned);
  }

  /**
   * Decodes, verifies and keeps in memory every chunk of `span` (window `w`'s bytes) that nobody
   * asked for and the cache lacks, in slices of KEEP_SLICE_BYTES per event-loop turn; first
   * registers the trigger that starts the next window and calls `planned`. Never rejects.
   */
  private async keepAhead(ps: Slot, g: Group, w: Window, index: PackIndex, span: Buffer, planned: () => void): Promise<void> {
    const { cache, stats } = this.source;
    const start = w.start;
    const asked = new Set<number>();
    for (const it of g.items) asked.add(it.loc.offset);
    // The index must agree with the catalog on the first blob asked for, else it is not trusted.
    const first = g.items.length > 0 ? g.items[0].loc : undefined;
    const at = first ? index.firstAtOrAfter(first.offset) : 0;
    if (first && (at >= index.count || index.offsets[at] !== first.offset || index.digestAt(at) !== first.digest)) {
      this.source.emit('pack-index-error', {
        pack: g.pack,
        error: new AwcError('E_FORMAT', `pack ${g.pack}: its index does not list ${first.digest} at ${first.offset}`),
      });
      this.packs.distrust(ps, index);
      return;
    }
    const end = start + span.length;
    const middle = start + (span.length >> 1);
    const first0 = index.firstAtOrAfter(start);
    let last = first0; // first blob not wholly inside the span
    while (last < index.count && index.offsets[last] + index.stored[last] <= end) last++;
    // A window read before the index was known may end inside a blob. From now on it ends at
    // its last whole blob: the next window starts there, and its stream goes on.
    if (last < index.count && index.offsets[last] < w.end) {
      const stream = ps.state.streams.find((s) => s.next === w.end);
      w.end = index.offsets[last];
      if (stream) stream.next = w.end;
    }
    // A reader that gets half way through this window will want the next one: read it then, in
    // the background. Registered before any slice is kept: a reader may get there first.
    if (last < index.count) {
      for (let i = first0; i < last; i++) {
        if (index.offsets[i] < middle || !index.isChunk(i) || asked.has(index.offsets[i])) continue;
        const digest = index.digestAt(i);
        if (cache.has(digest)) continue;
        this.triggers.set(digest, { pack: g.pack, at: index.offsets[last] });
        if (this.triggers.size > MAX_TRIGGERS) this.triggers.delete(this.triggers.keys().next().value as Digest);
        break;
      }
    }
    planned();
    let slice = 0;
    for (let i = first0; i < last; i++) {
      const offset = index.offsets[i];
      const storedLength = index.stored[i];
      if (!index.isChunk(i) || asked.has(offset)) continue;
      if (slice >= KEEP_SLICE_BYTES) {
        slice = 0;
        await new Promise<void>((r) => setImmediate(r));
      }
      const digest = index.digestAt(i);
      // (A chunk others wait for is kept too: requests that joined this window find it in memory.)
      if (cache.has(digest)) continue;
      slice += storedLength;
      const from = offset - start;
      const entry = { digest, codec: index.codecs[i] === 1 ? ('lz4' as const) : ('none' as const), storedLength, rawLength: index.raw[i] };
      let raw: Buffer;
      try {
        raw = decodeBlob(span.subarray(from, from + storedLength), entry);
      } catch (err) {
        stats.readAheadDropped++;
        this.source.emit('read-ahead-drop', { digest, pack: g.pack, error: err });
        continue;
      }
      if (entry.codec === 'none') raw = Buffer.from(raw); // a copy: do not pin the span
      if (cache.remember(digest, raw, { verified: true })) {
        stats.readAheadChunks++;
        stats.readAheadBytes += raw.length;
        this.source.emit('fetch', { digest, bytes: raw.length, readAhead: true });
      }
    }
  }

  /**
   * End of a window starting at `g.start`: past the blobs asked for, whole blobs up to
   * `limit`, stopping before blobs another window is reading and before a run of more than
   * maxGapBytes of chunks already held.
   */
  private windowEnd(ps: Slot, index: PackIndex, g: Group, limit: number): number {
    const windows = ps.state.windows;
    const maxGap = this.source.planner.limits.maxGapBytes;
    let end = g.end;
    let heldRun = 0;
    for (let i = index.firstAtOrAfter(g.end); i < index.count; i++) {
      const offset = index.offsets[i];
      const e = offset + index.stored[i];
      if (e > limit) break;
      if (windows.some((w) => offset < w.end && e > w.start)) break;
      if (index.isChunk(i) && this.source.cache.has(index.digestAt(i))) {
        heldRun += e - offset;
        if (heldRun > maxGap) break;
        continue; // not the new end yet: do not end a window on chunks already held
      }
      heldRun = 0;
      end = e;
    }
    return end;
  }

  /** The read stream a window [start, end) continues (the closest one whose last window ended at most maxGapBytes before `start`, or inside the window: its next window, twice as big), or a new one. */
  private streamAt(ps: Slot, start: number, end: number): { next: number; size: number } {
    const streams = ps.state.streams;
    const maxGap = this.source.planner.limits.maxGapBytes;
    let i = -1;
    for (let k = 0; k < streams.length; k++) {
      const s = streams[k];
      // it starts at most maxGap after where the stream's last window ended, or reads a blob that
      // window cut in two (read before the pack's index was known)
      const follows = start >= s.next ? start - s.next <= maxGap : end > s.next;
      if (follows && (i < 0 || s.next > streams[i].next)) i = k;
    }
    if (i >= 0) {
      const s = streams[i];
      streams.splice(i, 1);
      streams.push(s);
      s.size = Math.min(this.max, s.size * 2);
      return s;
    }
    const s = { next: start, size: this.min };
    streams.push(s);
    if (streams.length > STREAMS_PER_PACK) streams.shift();
    return s;
  }

  /** The pack's index, read alongside the windows in flight (see PackIndexCache.load); tracked for idle(). Never rejects. */
  private loadIndex(pack: string, ps: Slot): Promise<PackIndex | null> {
    const was = ps.loading;
    const p = this.packs.load(pack, ps, (size) => ps.state.windows.find((x) => x.end >= size));
    if (p !== was && ps.loading === p) this.track(p);
    return p;
  }

  private track(p: Promise<unknown>): void {
    this.background.add(p);
    void p.finally(() => this.background.delete(p));
  }
}
