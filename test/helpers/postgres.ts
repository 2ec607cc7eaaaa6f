import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { redactUrl } from '../../src/config/backend-url.js';

/**
 * The PostgreSQL server the tests use, and a fresh database per test.
 *
 * The server: `AWC_TEST_POSTGRES_URL` (an admin URL whose role may CREATE DATABASE, e.g.
 * `postgres://awc_test:awc_test@127.0.0.1:5432/postgres`), else that default, which
 * `scripts/postgres-test-server.sh` makes on this machine (run by `.ci/run` and, as root, by
 * `npm test`'s setup). Tests never skip for want of a server: they fail, saying how to start it.
 */

/** The default test server: the local cluster over TCP, as scripts/postgres-test-server.sh sets it up. */
export const DEFAULT_TEST_POSTGRES_URL = 'postgres://awc_test:awc_test@127.0.0.1:5432/postgres';

/** The admin URL of the test server (`AWC_TEST_POSTGRES_URL` or the default). */
export function postgresAdminUrl(): string {
  return process.env.AWC_TEST_POSTGRES_URL || DEFAULT_TEST_POSTGRES_URL;
}

/** `url` with its database (path) replaced by `database`. */
export function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${encodeURIComponent(database)}`;
  return u.toString();
}

let checked: Promise<void> | undefined;

/** Runs `fn` on one admin connection. @throws a plain Error saying how to start the server when it cannot be reached */
async function withAdmin<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const url = postgresAdminUrl();
  const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: 10_000 });
  try {
    await c.connect();
  } catch (err) {
    throw new Error(
      `the PostgreSQL test server at ${redactUrl(url)} cannot be reached (${(err as Error).message}). ` +
        'Start it with `bash scripts/postgres-test-server.sh` (as root: installs PostgreSQL if missing, starts the cluster, ' +
        'creates the awc_test role and prints the URL), or set AWC_TEST_POSTGRES_URL to a server whose role may CREATE DATABASE.',
      { cause: err },
    );
  }
  c.on('error', () => undefined);
  try {
    return await fn(c);
  } finally {
    await c.end().catch(() => undefined);
  }
}

/** Databases made by `freshDatabase` are named `awc_t_<pid>_<random>`. */
const PREFIX = 'awc_t_';

/** Drops test databases left by processes that no longer exist (a test run killed before its cleanup). */
async function dropLeftovers(c: pg.Client): Promise<void> {
  const r = await c.query<{ datname: string }>('select datname from pg_database where datname like $1', [`${PREFIX}%`]);
  for (const { datname } of r.rows) {
    const pid = Number(/^awc_t_(\d+)_/.exec(datname)?.[1]);
    if (!Number.isInteger(pid) || pid === process.pid) continue;
    try {
      process.kill(pid, 0);
      continue; // its process still runs (another test file, another helper's run)
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ESRCH') continue;
    }
    await c.query(`drop database if exists "${datname}" with (force)`).catch(() => undefined);
  }
}

/** SQLSTATEs of a forced drop that met a session it may not end yet (a backend still starting, autovacuum). */
const DROP_RETRY = new Set(['42501', '55006']);

/**
 * `DROP DATABASE … WITH (FORCE)`, retried for up to 5 s while PostgreSQL refuses to end a
 * session it sees in that database (42501: a backend whose role is not yet set; 55006: in use).
 */
async function dropForce(name: string): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    try {
      await withAdmin((c) => c.query(`drop database if exists "${name}" with (force)`));
      return;
    } catch (e) {
      const code = (e as { code?: string }).code;
      if (!code || !DROP_RETRY.has(code) || attempt >= 25) throw e;
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}

/** A database made for one test. */
export interface FreshDatabase {
  /** Its name. */
  name: string;
  /** A URL of it (the admin URL with this database). */
  url: string;
  /** Drops it, ending its sessions (`DROP DATABASE … WITH (FORCE)`); idempotent. */
  drop(): Promise<void>;
}

/**
 * Creates a uniquely named, empty database on the test server, so that tests never share
 * state. Drop it at cleanup (`drop()`, or use `freshDatabaseFor(t)`).
 * @throws Error saying how to start the server when it cannot be reached
 */
export async function freshDatabase(): Promise<FreshDatabase> {
  const name = `${PREFIX}${process.pid}_${randomBytes(6).toString('hex')}`;
  await withAdmin(async (c) => {
    checked ??= dropLeftovers(c);
    await checked;
    await c.query(`create database "${name}"`);
  });
  let dropped = false;
  return {
    name,
    url: withDatabase(postgresAdminUrl(), name),
    async drop() {
      if (dropped) return;
      dropped = true;
      await dropForce(name);
    },
  };
}

/** A fresh database dropped when the test (or suite) `t` ends. */
export async function freshDatabaseFor(t: { after(fn: () => Promise<void>): void }): Promise<FreshDatabase> {
  const db = await freshDatabase();
  t.after(() => db.drop());
  return db;
}
