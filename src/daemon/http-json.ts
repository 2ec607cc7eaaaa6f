import type { IncomingMessage, ServerResponse } from 'node:http';
import { AwcError } from '../core/errors.js';

/** Answers `body` as JSON with HTTP `status`. */
export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const data = Buffer.from(JSON.stringify(body));
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': data.length });
  res.end(data);
}

/** The request body as a JSON object (`{}` when empty). @throws E_USAGE when it is not JSON */
export function readJson(req: IncomingMessage): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    req.on('data', (d) => parts.push(d));
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
