import type * as TarStream from 'tar-stream';
import { AwcError } from '../../core/errors.js';

/**
 * Raw-byte pax records for tar-stream's packer. tar-stream builds a pax extended header from
 * JavaScript strings and encodes it as UTF-8, so a value that is not UTF-8 (a binary xattr
 * value: file capabilities, ACLs) cannot pass through it. `RawPax` lets a header carry such
 * records: when tar-stream writes the header's pax entry, the body it built is replaced by
 * one holding the same records plus the raw ones, and the size and checksum of the pax
 * entry's ustar header are rewritten to match. This is the form GNU tar writes and reads
 * (`SCHILY.xattr.<name>=<raw bytes>`), and how names that are not UTF-8 are written: raw
 * `path` / `linkpath` records under `hdrcharset=BINARY` (POSIX.1-2001 pax; GNU tar reads them
 * back byte for byte).
 */

/** One raw pax record: its key and its value as raw bytes (written `<len> <key>=<value>\n`). */
export interface RawPaxRecord {
  key: string;
  value: Buffer;
}

/** Fixed layout of the ustar header fields rewritten here. */
const SIZE_OFFSET = 124;
const CHECKSUM_OFFSET = 148;
const BLOCK = 512;

/** One pax record, `<len> <key>=<value>\n`, where `<len>` counts the whole record including itself. */
function paxRecord(key: string, value: Buffer): Buffer {
  const rest = Buffer.concat([Buffer.from(` ${key}=`, 'utf8'), value, Buffer.from('\n')]);
  let len = rest.length + 1;
  while (String(len).length + rest.length !== len) len = String(len).length + rest.length;
  return Buffer.concat([Buffer.from(String(len)), rest]);
}

/**
 * Splits a pax body into its records (`<len> <key>=<value>\n`), each whole. A body this module
 * did not write comes from tar-stream's encoder, so it is well formed; anything after a record
 * that does not parse is kept as it is.
 */
function paxRecords(body: Buffer): { key: string; record: Buffer }[] {
  const out: { key: string; record: Buffer }[] = [];
  let at = 0;
  while (at < body.length) {
    const space = body.indexOf(0x20, at);
    const len = space < 0 ? NaN : Number(body.subarray(at, space).toString('latin1'));
    const eq = space < 0 ? -1 : body.indexOf(0x3d, space);
    if (!Number.isInteger(len) || len <= 0 || at + len > body.length || eq < 0 || eq >= at + len) {
      out.push({ key: '', record: body.subarray(at) });
      break;
    }
    out.push({ key: body.subarray(space + 1, eq).toString('latin1'), record: body.subarray(at, at + len) });
    at += len;
  }
  return out;
}

/** Writes the 11-digit octal size and the checksum of a 512-byte ustar header in place. */
function patchUstar(h: Buffer, size: number): Buffer {
  const out = Buffer.from(h);
  out.write(size.toString(8).padStart(11, '0') + '\0', SIZE_OFFSET, 12, 'latin1');
  out.fill(0x20, CHECKSUM_OFFSET, CHECKSUM_OFFSET + 8);
  let sum = 0;
  for (const b of out) sum += b;
  out.write(sum.toString(8).padStart(6, '0') + '\0 ', CHECKSUM_OFFSET, 8, 'latin1');
  return out;
}

/** The part of tar-stream's Pack this relies on (private: `_encodePax` and `push`, tar-stream 3). */
interface PackInternals {
  _encodePax?: (header: Record<string, unknown>) => void;
  push(chunk: Buffer | null): boolean;
}

/** Raw pax records attached to tar-stream headers of one pack (see the module docs). */
export class RawPax {
  private readonly raw = new WeakMap<object, RawPaxRecord[]>();

  /**
   * Hooks `pack`. Returns undefined when tar-stream's internals are not as expected (then
   * nothing is hooked and callers must not use raw records).
   */
  static hook(pack: TarStream.Pack): RawPax | undefined {
    const p = pack as unknown as PackInternals;
    const original = p._encodePax;
    if (typeof original !== 'function') return undefined;
    const self = new RawPax();
    p._encodePax = function (this: PackInternals, header: Record<string, unknown>) {
      const raw = self.raw.get(header);
      if (!raw) return original.call(this, header);
      const pushed: Buffer[] = [];
      const push = this.push;
      this.push = (b: Buffer | null) => (b && pushed.push(b), true);
      try {
        original.call(this, header);
      } finally {
        this.push = push;
      }
      // tar-stream pushed: the pax entry's ustar header, its body, the padding (if any), the entry's ustar header
      const [paxHeader, body] = pushed;
      const main = pushed[pushed.length - 1]!;
      // a raw record replaces tar-stream's record of the same key (e.g. `path` of a raw name, which it wrote as UTF-8)
      const replaced = new Set(raw.map((r) => r.key));
      const kept = paxRecords(body!).filter((r) => !replaced.has(r.key));
      const full = Buffer.concat([...kept.map((r) => r.record), ...raw.map((r) => paxRecord(r.key, r.value))]);
      this.push(patchUstar(paxHeader!, full.length));
      this.push(full);
      if (full.length % BLOCK) this.push(Buffer.alloc(BLOCK - (full.length % BLOCK)));
      this.push(main);
    };
    return self;
  }

  /**
   * Attaches raw records to `header`, which must also carry a `pax` object
   * (possibly empty); records attached earlier stay. A key tar-stream also writes (`path`,
   * `linkpath`) is written once, with the raw value.
   */
  attach(header: object, records: RawPaxRecord[]): void {
    if (records.length > 0) this.raw.set(header, [...(this.raw.get(header) ?? []), ...records]);
  }
}

/** Parses raw pax extended-header records (`<len> <key>=<value>\n`): key → raw value bytes. @throws E_FORMAT when malformed. */
export function parsePaxRecords(buf: Buffer): Map<string, Buffer> {
  const out = new Map<string, Buffer>();
  let pos = 0;
  while (pos < buf.length) {
    if (buf[pos] === 0) break; // padding
    const sp = buf.indexOf(0x20, pos);
    const len = sp < 0 ? NaN : Number(buf.toString('latin1', pos, sp));
    if (!Number.isInteger(len) || len <= sp - pos + 1 || pos + len > buf.length || buf[pos + len - 1] !== 0x0a) {
      throw new AwcError('E_FORMAT', `malformed pax extended header at byte ${pos}`);
    }
    const rec = buf.subarray(sp + 1, pos + len - 1);
    const eq = rec.indexOf(0x3d);
    if (eq <= 0) throw new AwcError('E_FORMAT', `malformed pax record at byte ${pos}`);
    out.set(rec.toString('utf8', 0, eq), rec.subarray(eq + 1));
    pos += len;
  }
  return out;
}

/**
 * Captures the raw bytes of each pax extended header `ex` decodes (tar-stream decodes pax
 * values as UTF-8 strings, which loses binary xattr values and names that are not UTF-8):
 * returns, for each entry's header in turn, its pax records (the global ones overlaid with the
 * entry's own) as raw bytes. Without tar-stream's `_decodeLongHeader` to hook, the decoded
 * strings are encoded back as UTF-8.
 * @throws E_FORMAT (from the stream, when a captured header is malformed)
 */
export function rawPaxReader(ex: TarStream.Extract): (header: TarStream.Header) => Map<string, Buffer> {
  let local: Map<string, Buffer> | null = null;
  let global: Map<string, Buffer> | null = null;
  const hooked = ex as unknown as { _decodeLongHeader?: (buf: Buffer) => unknown; _header?: { type?: string } };
  const original = hooked._decodeLongHeader;
  if (typeof original !== 'function') {
    return (h) =>
      new Map(Object.entries((h as { pax?: Record<string, string> }).pax ?? {}).map(([k, v]) => [k, Buffer.from(String(v), 'utf8')]));
  }
  hooked._decodeLongHeader = function (this: typeof hooked, buf: Buffer) {
    const t = this._header?.type;
    if (t === 'pax-header') local = parsePaxRecords(buf);
    else if (t === 'pax-global-header') global = parsePaxRecords(buf);
    return original.call(this, buf);
  };
  return (h) => {
    const m = new Map(global ?? []);
    if ((h as { pax?: unknown }).pax && local) for (const [k, v] of local) m.set(k, v);
    local = null;
    return m;
  };
}
