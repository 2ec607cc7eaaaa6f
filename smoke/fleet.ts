import { execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PROJECT } from '../test/helpers/cli.js';
import { freshDatabase, type FreshDatabase } from '../test/helpers/postgres.js';
import { freshBucket, startS3Server, type S3TestServer, type TestBucket } from '../test/helpers/s3.js';
import { FleetSmoke, type SmokeStep } from './fleet-smoke.js';

/**
 * `npm run smoke:fleet`: the local fleet smoke (smoke/fleet-smoke.ts) with its services.
 *
 * - PostgreSQL: `AWC_TEST_POSTGRES_URL` when set; else the machine's cluster, made ready by
 *   scripts/postgres-test-server.sh (pg_ctlcluster; as root it creates the test role). A cluster
 *   that was down before is stopped again at the end.
 * - S3: `AWC_TEST_S3_ENDPOINT` when set; else scripts/s3-server.mjs (s3rver) on 127.0.0.1, stopped at the end.
 * - A fresh database and bucket, dropped and removed at the end; a lease TTL of 3 s.
 *
 * The hosts' settings come from their `config.json` (written by the smoke): `AWC_*` variables
 * of this process other than `AWC_TEST_*` are dropped, so that they cannot override them.
 *
 * Prints one line per step (`ok` or `FAIL`, its time, what it saw) and a summary. Exit status 0
 * when every step passed, 1 otherwise, 130 when interrupted (Ctrl-C or SIGTERM: the running
 * step fails at its next CLI call, then everything started is cleaned up). Needs root (mounts).
 */
async function main(): Promise<number> {
  const abort = new AbortController();
  const stop = (sig: NodeJS.Signals) => {
    if (abort.signal.aborted) return;
    console.log(`fleet smoke: ${sig}, cleaning up`);
    abort.abort();
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
  for (const k of Object.keys(process.env)) if (k.startsWith('AWC_') && !k.startsWith('AWC_TEST_')) delete process.env[k];
  const undo: (() => Promise<void> | void)[] = [];
  try {
    if (!process.env.AWC_TEST_POSTGRES_URL) {
      const wasDown = clusterDown();
      process.env.AWC_TEST_POSTGRES_URL = execFileSync('bash', [join(PROJECT, 'scripts', 'postgres-test-server.sh')], {
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'inherit'],
      }).trim();
      if (wasDown) undo.push(() => void execFileSync('pg_ctlcluster', [...wasDown, 'stop'], { stdio: 'inherit' }));
      console.log(`fleet smoke: PostgreSQL ${wasDown ? 'started' : 'already up'}`);
    }
    let endpoint = process.env.AWC_TEST_S3_ENDPOINT;
    if (!endpoint) {
      const s3: S3TestServer = await startS3Server();
      undo.push(() => s3.stop());
      endpoint = s3.endpoint;
      console.log(`fleet smoke: S3 server (s3rver) at ${endpoint}`);
    }
    const db: FreshDatabase = await freshDatabase();
    undo.push(() => db.drop());
    const bucket: TestBucket = await freshBucket(undefined, endpoint);
    undo.push(() => bucket.remove());
    console.log(`fleet smoke: database ${db.name}, bucket ${bucket.name}`);
    Object.assign(process.env, bucket.env); // (the smoke's in-process service calls read the credentials as the CLI does)

    const smoke = new FleetSmoke({
      catalog: db.url,
      objectStore: bucket.url('fleet'),
      env: bucket.env,
      workDir: mkdtempSync(join(tmpdir(), 'awc-fleet-smoke-')),
      leaseTtlMs: 3000,
      signal: abort.signal,
    });
    smoke.on('step', (s: SmokeStep) => console.log(`${s.ok ? 'ok  ' : 'FAIL'} ${s.step} (${s.ms} ms): ${s.detail}`));
    smoke.on('cleanup', (m) => console.log(`fleet smoke: clean-up: ${m}`));
    const steps = await smoke.run();
    const failed = steps.find((s) => !s.ok);
    console.log(failed ? `fleet smoke: FAILED at "${failed.step}"` : `fleet smoke: all ${steps.length} steps passed`);
    return abort.signal.aborted ? 130 : failed ? 1 : 0;
  } finally {
    for (const u of undo.reverse())
      await Promise.resolve()
        .then(u)
        .catch((e: unknown) => console.log(`fleet smoke: clean-up: ${e instanceof Error ? e.message : String(e)}`));
  }
}

/** `[version, cluster]` of the machine's `main` cluster when it is installed and down; undefined otherwise. */
function clusterDown(): [string, string] | undefined {
  try {
    const line = execFileSync('pg_lsclusters', ['-h'], { encoding: 'utf8' })
      .split('\n')
      .map((l) => l.trim().split(/\s+/))
      .find((f) => f[1] === 'main');
    return line && line[3] !== 'online' ? [line[0]!, 'main'] : undefined;
  } catch {
    return undefined; // not installed: the script installs and starts it; left running
  }
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(`fleet smoke: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  },
);
