import type { IncomingMessage, ServerResponse } from 'node:http';
import { AwcError } from '../core/errors.js';

/** Answers `body` as JSON with HTTP `status`. */
export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const data = Buffer.from(JSON.stringify(body));
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': data.length });
  res.end(data);
}

/** The most a JSON request body may be (bytes): a run request's environment and arguments fit well under it. */
export const MAX_JSON_BODY = 8 * 1024 * 1024;

/** The request body as a JSON object (`{}` when empty). @throws E_USAGE when it is not JSON, or over MAX_JSON_BODY bytes */
export function readJson(req: IncomingMessage): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    let n = 0;
    req.on('data', (d: Buffer) => {
      n += d.length;
      if (n <= MAX_JSON_BODY) return void parts.push(d);
      req.pause();
      reject(new AwcError('E_USAGE', `request body over ${MAX_JSON_BODY} bytes`));
    });
    req.on('error', reject);
    req.on('end', () => {
      try {
        const t = Buffer.concat(parts).toString('utf8');
        resolve(t === '' ? {} : JSON.parse(t));
      } catch {
        reject(new AwcError('E_USAGE', 'request body is not JSON'));
      }
    });
  });
}
