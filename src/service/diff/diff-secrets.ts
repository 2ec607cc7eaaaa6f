import { createHash } from 'node:crypto';
import { readSync } from 'node:fs';
import type { Digest } from '../../core/digest.js';
import { compareNames } from '../../core/tree.js';
import { printable, type Change } from './diff.js';
import { formatBytes } from '../../core/format-bytes.js';

/**
 * A secret file the live side of a diff holds and a checkpoint leaves out (never stored).
 * `status` compares it with the other side's stored file at the same path: `added` (none
 * there), `modified` (other bytes), `unchanged` (the same bytes: a copy stored before, e.g.
 * while it was opted in). `size` is in bytes.
 */
export interface DiffSecret {
  path: string;
  size: number;
  status: 'added' | 'modified' | 'unchanged';
}

/** A scratch path the live side of a diff holds and a checkpoint drops: its regular files and bytes. */
export interface DiffDropped {
  path: string;
  files: number;
  bytes: number;
}

/** What a live scan left out, as a diff needs it: each secret with the sha256 digest of its bytes (never stored). */
export interface LiveLeftOut {
  secrets: { path: string; size: number; digest: Digest }[];
  dropped: DiffDropped[];
}

/**
 * Records the content digest of each secret a live scan leaves out (a CaptureRecorder's
 * `keep`): read through the descriptor the walk opened, hashed in memory, never written anywhere.
 */
export class SecretDigests {
  private readonly digests = new Map<string, Digest>();

  /** Hashes the file open at `fd` (`rel` its slash path); the descriptor's offset is not moved. */
  keep(rel: string, fd: number): void {
    const h = createHash('sha256');
    const buf = Buffer.alloc(1024 * 1024);
    for (let pos = 0; ;) {
      const n = readSync(fd, buf, 0, buf.length, pos);
      if (n === 0) break;
      h.update(buf.subarray(0, n));
      pos += n;
    }
    this.digests.set(rel, `sha256:${h.digest('hex')}`);
  }

  /** The digest of the secret at `rel` (as content-writer.ts computes a file's: sha256 of the whole content). */
  of(rel: string): Digest {
    return this.digests.get(rel) ?? 'sha256:';
  }
}

/**
 * Marks the secrets of a diff's live side (docs/explanation/capture-classes.md#diff): the
 * scan left them out of its tree, so a secret that the other side has as a stored file
 * shows up in `changes` as `deleted`; that change is taken out (it is no stored change
 * the workspace made: the file is on the host) and the secret listed with its status.
 * `changes` is not modified; the result's changes hold no secret path, so a patch made of
 * them never prints a secret's bytes.
 */
export function markSecrets(changes: readonly Change[], left: LiveLeftOut): { changes: Change[]; secrets: DiffSecret[] } {
  const byPath = new Map(left.secrets.map((s) => [s.path, s]));
  const secrets: DiffSecret[] = [];
  const out: Change[] = [];
  const matched = new Set<string>();
  for (const c of changes) {
    const s = byPath.get(c.path);
    if (s && c.status === 'deleted' && (c.old?.type === 'file' || c.old?.type === 'hardlink')) {
      matched.add(c.path);
      secrets.push({ path: s.path, size: s.size, status: c.old.digest === s.digest ? 'unchanged' : 'modified' });
    } else out.push(c);
  }
  for (const s of left.secrets) if (!matched.has(s.path)) secrets.push({ path: s.path, size: s.size, status: 'added' });
  secrets.sort((a, b) => compareNames(a.path, b.path));
  return { changes: out, secrets };
}

/** Text lines for what a diff's live side leaves out: `S  <path> (secret, …)` and `X  <path> (scratch, …)`. */
export function formatLeftOut(secrets: readonly DiffSecret[], dropped: readonly DiffDropped[]): string {
  const what = { added: 'new', modified: 'changed', unchanged: 'unchanged' } as const;
  let out = '';
  for (const s of secrets) out += `S  ${printable(s.path)} (secret, ${what[s.status]}: not stored, it stays on this host)\n`;
  for (const d of dropped) out += `X  ${printable(d.path)} (scratch: a checkpoint drops it, ${d.files} files, ${formatBytes(d.bytes)})\n`;
  return out;
}
