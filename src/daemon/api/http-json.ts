import type { IncomingMessage, ServerResponse } from 'node:http';
import { AwcError } from '../../core/errors.js';
import { BODY_WAIT_MS, bodyBudget, bodyOwnerOf } from './body-budget.js';

/** Answers `body` as JSON with HTTP `status`. */
export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const data = Buffer.from(JSON.stringify(body));
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': data.length });
  res.end(data);
}

/** How long a connection answered before its request's body ended still reads (and discards) what comes, in ms. */
export const LINGER_MS = 2000;

const lingering = new WeakSet<object>();

/**
 * A lingering close (Apache httpd's `lingering_close`; RFC 9112 §9.6) of a connection whose
 * answer was written before its request's body ended (an upload over its cap, a refused body):
 * the daemon's side is ended (FIN after the answer) while what the client still sends is read and
 * discarded for LINGER_MS at most, then the socket is destroyed. Closing at once would make the
 * client's next write fail with EPIPE before it reads the answer, so it would see the daemon
 * vanish instead of the error. Call it once the answer is written (its `finish`); a second call
 * on the same connection does nothing.
 */
export function lingeringClose(req: IncomingMessage): void {
  const socket = req.socket;
  if (socket.destroyed || lingering.has(socket)) return;
  lingering.add(socket);
  req.resume();
  socket.end();
  const t = setTimeout(() => socket.destroy(), LINGER_MS).unref();
  socket.once('close', () => clearTimeout(t));
}

/** The most a JSON request body may be (bytes): a run request's environment and arguments fit well under it. */
export const MAX_JSON_BODY = 8 * 1024 * 1024;

/**
 * The request body as a JSON object (`{}` when empty). Its bytes count against the daemon's
 * one body budget (src/daemon/api/body-budget.ts) while they are read, under the owner the socket
 * tagged the request with: as they arrive, never by a declared `content-length` (a caller that
 * declares a large body and sends nothing holds nothing); given back once parsed, refused or
 * abandoned. A body waits for room BODY_WAIT_MS (1 s) at most in all, then is refused.
 * @throws E_USAGE when it is not JSON, or over MAX_JSON_BODY bytes; E_TOO_MANY when it does not fit the budget
 */
export function readJson(req: IncomingMessage): Promise<Record<string, unknown>> {
  const owner = bodyOwnerOf(req);
  const declared = Number(req.headers['content-length'] ?? 0);
  let held = 0;
  let settled = false;
  return new Promise<Record<string, unknown>>((resolve, reject) => {
    const parts: Buffer[] = [];
    let n = 0;
    let taking = false;
    let ended = false;
    const settle = (err: unknown, value?: Record<string, unknown>): void => {
      if (settled) return;
      settled = true;
      req.off('data', onData);
      parts.length = 0;
      bodyBudget.give(owner, held);
      held = 0;
      if (err) {
        req.pause();
        reject(err);
      } else resolve(value!);
    };
    const finish = (): void => {
      try {
        const t = Buffer.concat(parts).toString('utf8');
        settle(undefined, t === '' ? {} : JSON.parse(t));
      } catch {
        settle(new AwcError('E_USAGE', 'request body is not JSON'));
      }
    };
    // a body waits for room BODY_WAIT_MS at most in all (not per chunk): one that keeps waiting is refused
    let waited = 0;
    const take = (want: number): void => {
      taking = true;
      req.pause();
      const t0 = Date.now();
      bodyBudget.take(owner, want, Math.max(0, BODY_WAIT_MS - waited)).then(
        () => {
          waited += Date.now() - t0;
          taking = false;
          if (settled) return bodyBudget.give(owner, want);
          held += want;
          if (ended) finish();
          else req.resume();
        },
        (err: unknown) => settle(err),
      );
    };
    const onData = (d: Buffer): void => {
      n += d.length;
      if (n > MAX_JSON_BODY) return settle(new AwcError('E_USAGE', `request body over ${MAX_JSON_BODY} bytes`));
      parts.push(d);
      if (n > held) take(n - held);
    };
    if (Number.isSafeInteger(declared) && declared > MAX_JSON_BODY)
      return settle(new AwcError('E_USAGE', `request body over ${MAX_JSON_BODY} bytes`));
    req.on('error', (err) => settle(err));
    // a caller gone before its body arrived whole: its bytes go back (a body that arrived whole but is
    // not read yet, paused for the budget, still ends: 'end' follows once it is resumed)
    req.on('close', () => {
      if (!req.complete) settle(new AwcError('E_USAGE', 'the request body ended early'));
    });
    req.on('end', () => {
      ended = true;
      if (!taking) finish();
    });
    req.on('data', onData);
    req.resume();
  });
}
