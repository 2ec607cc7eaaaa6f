import { createWriteStream } from 'node:fs';
import { rm } from 'node:fs/promises';
import type { IncomingMessage } from 'node:http';
import { join } from 'node:path';
import { AwcError, toAwcError } from '../core/errors.js';
import { formatBytes } from '../core/format-bytes.js';
import { mkdirPrivate } from '../core/private-fs.js';

/** The error of an upload over `maxBytes` (E_UPLOAD_TOO_LARGE; the hint is the registry's). */
function tooLarge(maxBytes: number): AwcError {
  return new AwcError(
    'E_UPLOAD_TOO_LARGE',
    `the import is over the ${formatBytes(maxBytes)} (${maxBytes} bytes) the daemon takes from a user (uploadMaxBytes)`,
    { details: { uploadMaxBytes: maxBytes } },
  );
}

/**
 * Receives the body of an ordinary user's `POST /v1/import` (a tar the user's process made,
 * its sparse files as GNU sparse 1.0 members: their data only) into a new 0600 file in `dir`
 * (made 0700 when missing), counting its bytes as they arrive: docs/explanation/security.md
 * "Uploads: sparse and capped".
 * @param maxBytes the most bytes the body may have (the configuration's `uploadMaxBytes`)
 * @returns the file's path; the caller removes it once imported
 * @throws AwcError E_UPLOAD_TOO_LARGE when the body (or its announced `content-length`) is
 *   over `maxBytes`: nothing of it is left in `dir`; E_NO_SPACE, E_IO as the disk fails
 *   (the partial file removed too)
 */
export async function receiveUpload(req: IncomingMessage, dir: string, maxBytes: number): Promise<string> {
  const announced = Number(req.headers['content-length']);
  if (Number.isFinite(announced) && announced > maxBytes) throw tooLarge(maxBytes);
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
        received += chunk.length;
        if (received > maxBytes && !failed) fail(tooLarge(maxBytes));
      });
      req.once('error', fail).once('aborted', () => fail(new AwcError('E_IO', 'the upload was cut off by the client')));
      out.once('error', fail).once('finish', resolve);
      req.pipe(out);
    });
    return tmp;
  } catch (err) {
    // closed first: a file still being opened would appear after the rm
    if (!out.closed) await new Promise<void>((r) => out.once('close', () => r()));
    await rm(tmp, { force: true });
    throw toAwcError(err);
  }
}
