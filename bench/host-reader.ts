import { closeSync, openSync, readFileSync, readSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

/**
 * The reader of bench/fig-host.ts's "reads while the host is busy" figures, in a process of its
 * own (so its latencies do not include the bench process's event loop, where the import or
 * checkpoint under test runs, nor the daemon's).
 *
 *   node dist/bench/host-reader.js <root> <list.json> <intervalMs> <out.json>
 *
 * `list.json` is a JSON array of paths relative to `root`, each read at most once, in order.
 * Prints `ready` once loaded; on the line `go` on stdin it reads the files one by one (open,
 * blocking reads into one 64 KiB buffer until EOF, close: one read's latency), sleeping
 * `intervalMs` between reads, until the list ends or the line `stop` arrives; then writes
 * `{ reads: [[startEpochMs, ms], …], exhausted }` to `out.json` (a file: a line of hundreds of KiB
 * on a pipe was cut short by the exit), prints `done` and exits 0. Start times are
 * `performance.timeOrigin + performance.now()` (epoch ms, sub-millisecond), comparable across
 * processes. A failed read exits 1 with the error on stderr.
 */

const [root, listFile, intervalArg, outFile] = process.argv.slice(2);
const paths = JSON.parse(readFileSync(listFile, 'utf8')) as string[];
const interval = Number(intervalArg);
const buf = Buffer.allocUnsafe(64 * 1024);
const epoch = (): number => performance.timeOrigin + performance.now();

let stopped = false;
let started = false;

/** Reads one file whole; returns its start (epoch ms) and latency (ms). */
function readOne(path: string): [number, number] {
  const t0 = epoch();
  const fd = openSync(join(root, path), 'r');
  try {
    while (readSync(fd, buf, 0, buf.length, null) > 0);
  } finally {
    closeSync(fd);
  }
  return [t0, epoch() - t0];
}

async function run(): Promise<void> {
  const reads: [number, number][] = [];
  let i = 0;
  for (; i < paths.length && !stopped; i++) {
    reads.push(readOne(paths[i]));
    await new Promise((r) => setTimeout(r, interval));
  }
  writeFileSync(outFile, JSON.stringify({ reads, exhausted: i >= paths.length && !stopped }));
  process.stdout.write('done\n', () => process.exit(0));
}

const lines = createInterface({ input: process.stdin });
lines.on('line', (line) => {
  if (line === 'go' && !started) {
    started = true;
    run().catch((err: unknown) => {
      process.stderr.write(`host-reader: ${(err as Error).message}\n`);
      process.exit(1);
    });
  } else if (line === 'stop') stopped = true;
});
process.stdout.write('ready\n');
