// The stage inside an ordinary user's `awc run` namespace (src/host/mount/namespace-bind.ts), as the
// root daemon starts it: `unshare --mount --propagation private -- node run-bind-main.js`, with
// the caller's stdin, stdout and stderr, the spec on descriptor 3 (JSON, to its end: the daemon
// closes it once the stage may go on) and the report on descriptor 4.
import * as fs from 'node:fs';
import { bindAndBecomeCaller, bindFailure, type BindSpec } from './namespace-bind.js';

const SPEC_FD = 3;
const REPORT_FD = 4;
const pause = new Int32Array(new SharedArrayBuffer(4));

/** Everything on `fd` up to its end (a socket the daemon writes the spec to, then closes). */
function readAll(fd: number): string {
  const parts: Buffer[] = [];
  const buf = Buffer.alloc(65536);
  for (;;) {
    let n: number;
    try {
      n = fs.readSync(fd, buf, 0, buf.length, null);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EAGAIN') throw err;
      Atomics.wait(pause, 0, 0, 5);
      continue;
    }
    if (n === 0) return Buffer.concat(parts).toString('utf8');
    parts.push(Buffer.from(buf.subarray(0, n)));
  }
}

try {
  const spec = JSON.parse(readAll(SPEC_FD)) as BindSpec;
  fs.closeSync(SPEC_FD);
  bindAndBecomeCaller(spec, REPORT_FD);
} catch (err) {
  try {
    fs.writeSync(REPORT_FD, JSON.stringify(bindFailure(err)) + '\n');
  } finally {
    process.exit(125);
  }
}
