import { createWriteStream } from 'node:fs';
import { rm } from 'node:fs/promises';
import type { IncomingMessage } from 'node:http';
import { join } from 'node:path';
import { AwcError, toAwcError } from '../../core/errors.js';
import { formatBytes } from '../../core/format-bytes.js';
import { mkdirPrivate } from '../../core/private-fs.js';

/** The error of an upload over `maxBytes` (E_UPLOAD_TOO_LARGE; the hint is the registry's). */
function tooLarge(maxBytes: number): AwcError {
  return new AwcError(
    'E_UPLOAD_TOO_LARGE',
    `the import is over the ${formatBytes(maxBytes)} (${maxBytes} bytes) the daemon takes from a user (uploadMaxBytes)`,
    { details: { uploadMaxBytes: maxBytes } },
  );
}

/** The error of an upload that fits `maxBytes` alone but not with the user's other uploads in flight (E_TOO_MANY, retryable). */
function tooMuchInFlight(uid: number, maxBytes: number): AwcError {
  return new AwcError(
    'E_TOO_MANY',
    `uid ${uid}'s uploads in flight together are over the ${formatBytes(maxBytes)} (${maxBytes} bytes) the daemon takes from a user (uploadMaxBytes)`,
    {
      hint: "Your other imports to the root daemon hold the rest of uploadMaxBytes (the root home's config.json); wait for them to finish, then run this one again.",
      details: { cap: 'uploadMaxBytes', value: maxBytes },
    },
  );
}

/**
 * The bytes of each user's uploads in flight (received, and not yet imported and removed):
 * all of one uid's together are held to `uploadMaxBytes`, so running N imports at once does
 * not let a user put N times the cap on root's disk.
 */
export class UploadLedger {
  private readonly held = new Map<number, number>();

  /** Bytes `uid` holds in uploads now. */
  of(uid: number): number {
    return this.held.get(uid) ?? 0;
  }

  /** Counts `n` more bytes (may be negative: given back) for `uid`. */
  add(uid: number, n: number): void {
    const left = this.of(uid) + n;
    if (left > 0) this.held.set(uid, left);
    else this.held.delete(uid);
  }
}

/** Who an upload is counted against: the user's uid in the daemon's ledger of uploads in flight. */
export interface UploadAccount {
  uid: number;
  ledger: UploadLedger;
}

/**
 * Receives the body of an ordinary user's `POST /v1/import` (a tar the user's process made,
 * its sparse files as GNU sparse 1.0 members: their data only) into a new 0600 file in `dir`
 * (made 0700 when missing), counting its bytes as they arrive: docs/explanation/security.md
 * "Uploads: sparse and capped".
 * @param maxBytes the most bytes the body may have (the configuration's `uploadMaxBytes`), and
 *   the most all uploads of `account.uid` in flight may hold together
 * @param account the ledger the bytes are counted in as they arrive: the caller gives back
 *   `bytes` (`account.ledger.add(uid, -bytes)`) once the file is removed; on a throw they are given back already
 * @returns the file's path and its size; the caller removes it once imported
 * @throws AwcError E_UPLOAD_TOO_LARGE when the body (or its announced `content-length`) is
 *   over `maxBytes`: nothing of it is left in `dir`; E_TOO_MANY (retryable) when it fits
 *   alone but not with the user's other uploads in flight; E_NO_SPACE, E_IO as the disk fails
 *   (the partial file removed too)
 */
export async function receiveUpload(
  req: IncomingMessage,
  dir: string,
  maxBytes: number,
  account: UploadAccount,
): Promise<{ path: string; bytes: number }> {
  const { uid, ledger } = account;
  const announced = Number(req.headers['content-length']);
  if (Number.isFinite(announced) && announced > maxBytes) throw tooLarge(maxBytes);
  if (Number.isFinite(announced) && ledger.of(uid) + announced > maxBytes) throw tooMuchInFlight(uid, maxBytes);
  await mkdirPrivate(dir);
  const tmp = join(dir, `${process.pid}-${Date.now()}-${Math.random().toString(36).slice(2)}.tar`);
  let received = 0;
  const out = createWriteStream(tmp, { mode: 0o600, flags: 'wx' });
  try {
    // not stream.pipeline: it would destroy the request (and its socket) on the cap, and the
    // caller could not answer; the rest of an over-cap body is left to the caller (see UserRpc.handle)
    await new Promise<void>((resolve, reject) => {
      let failed = false;
      const fail = (err: unknown): void => {
        if (failed) return;
        failed = true;
        req.unpipe(out);
        out.destroy();
        reject(err);
      };
      req.on('data', (chunk: Buffer) => {
        if (failed) return;
        received += chunk.length;
        ledger.add(uid, chunk.length);
        if (received > maxBytes) fail(tooLarge(maxBytes));
        else if (ledger.of(uid) > maxBytes) fail(tooMuchInFlight(uid, maxBytes));
      });
      req.once('error', fail).once('aborted', () => fail(new AwcError('E_IO', 'the upload was cut off by the client')));
      out.once('error', fail).once('finish', resolve);
      req.pipe(out);
    });
    return { path: tmp, bytes: received };
  } catch (err) {
    // closed first: a file still being opened would appear after the rm
    if (!out.closed) await new Promise<void>((r) => out.once('close', () => r()));
    await rm(tmp, { force: true });
    ledger.add(uid, -received);
    throw toAwcError(err);
  }
}
