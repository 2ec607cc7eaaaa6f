/**
 * A chunking thread of ChunkPool (./chunk-pool.ts): cuts the bytes it is sent with FastCDC
 * (src/core/fastcdc.ts) and hashes each chunk and the whole content with SHA-256, for one
 * or more files at a time, each a session that the main thread feeds in order.
 *
 * Messages in: ChunkRequest (a window in shared memory, only read); out: ChunkReply or ChunkFailure.
 */
import { parentPort } from 'node:worker_threads';
import { createHash, type Hash } from 'node:crypto';
import { Chunker } from '../../core/fastcdc.js';
import { sha256, type Digest } from '../../core/digest.js';
import type { ChunkFailure, ChunkReply, ChunkRequest } from './chunk-pool.js';

/** One file in progress: its chunker, and its whole-content hash (undefined until a second push). */
interface Session {
  chunker: Chunker;
  whole: Hash | undefined;
}

const sessions = new Map<number, Session>();

/** Cuts and hashes one window; the session ends with `final`. */
function handle(req: ChunkRequest): ChunkReply {
  const view = new Uint8Array(req.buf, 0, req.len);
  let s = sessions.get(req.sid);
  const first = s === undefined;
  s ??= { chunker: new Chunker(), whole: undefined };
  const lens: number[] = [];
  const digests: Digest[] = [];
  const take = (c: Uint8Array): void => {
    lens.push(c.length);
    digests.push(sha256(c));
  };
  for (const c of s.chunker.push(view)) take(c);
  if (first && req.final) {
    // The whole content in one window: its digest is its only chunk's, else one more pass.
    const last = s.chunker.finish();
    if (last) take(last);
    const whole = digests.length === 1 ? digests[0] : sha256(view);
    return { id: req.id, lens, digests, whole };
  }
  s.whole ??= createHash('sha256');
  s.whole.update(view);
  if (!req.final) {
    sessions.set(req.sid, s);
    return { id: req.id, lens, digests };
  }
  sessions.delete(req.sid);
  const last = s.chunker.finish();
  if (last) take(last);
  return { id: req.id, lens, digests, whole: `sha256:${s.whole.digest('hex')}` };
}

parentPort?.on('message', (req: ChunkRequest | { abort: number }) => {
  if ('abort' in req) {
    sessions.delete(req.abort);
    return;
  }
  try {
    const reply = handle(req);
    parentPort!.postMessage(reply);
  } catch (err) {
    sessions.delete(req.sid);
    const fail: ChunkFailure = { id: req.id, error: err instanceof Error ? err.message : String(err) };
    parentPort!.postMessage(fail);
  }
});
