import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as z from 'zod';
import { awcOk, cleanupMounts } from '../../helpers/cli.js';
import { createTestUser, usersAndOverlaySkip, type TestUser } from '../../helpers/unprivileged.js';
import { userSocketsDirOf } from '../../../src/config/config.js';
import { REMOTE_METHODS } from '../../../src/service/workspace/remote-methods.js';
import { USER_METHODS } from '../../../src/daemon/users/user-methods.js';
import { ImportArgs, USER_ENDPOINTS } from '../../../src/daemon/users/user-schemas.js';

/** One raw request a user sends their socket. */
interface Req {
  path: string;
  body?: unknown;
  /** Sent as the raw body instead of JSON of `body`. */
  raw?: string;
  headers?: Record<string, string>;
}

/** Sends each request of the JSON file argv[1] to the socket argv[2], one at a time; prints [{status, code, message}]. */
const SEND = `
const http = require('http');
const reqs = JSON.parse(require('fs').readFileSync(process.argv[1], 'utf8'));
const one = (r) => new Promise((resolve) => {
  const q = http.request({ socketPath: process.argv[2], method: 'POST', path: r.path, headers: { 'content-type': 'application/json', ...(r.headers || {}) } }, (res) => {
    const parts = [];
    res.on('data', (d) => parts.push(d));
    res.on('end', () => {
      let e = {};
      try { e = JSON.parse(Buffer.concat(parts).toString()).error || {}; } catch {}
      resolve({ status: res.statusCode, code: e.code, message: e.message });
    });
  });
  q.on('error', (err) => resolve({ status: 0, code: 'socket ' + err.code }));
  q.end(r.raw !== undefined ? r.raw : r.body === undefined ? '' : JSON.stringify(r.body));
});
(async () => { const out = []; for (const r of reqs) out.push(await one(r)); console.log(JSON.stringify(out)); })();
`;

/** One value of every JSON type (and a few shapes of each): what a hostile caller puts in any argument or field. */
const JSON_VALUES: readonly unknown[] = [null, true, false, 0, -1.5, 'x', '', 'a\u0000b', [], [1, 'x'], {}, { a: 1 }];

/** Candidates for a valid value of one argument or field, tried in order against its schema (what a well-formed request holds). */
const CANDIDATES: readonly unknown[] = [undefined, 'default', 'abcdefgh12', '/no/such/awc-ref', 0, false, [], {}];

/** The first candidate `schema` accepts. */
function sample(schema: z.ZodType, where: string): unknown {
  for (const c of CANDIDATES) if (schema.safeParse(c).success) return c;
  if (schema instanceof z.ZodObject) {
    const o = Object.fromEntries(
      Object.entries(schema.shape as Record<string, z.ZodType>).map(([k, f]) => [k, sample(f, `${where}.${k}`)]),
    );
    if (schema.safeParse(o).success) return o;
  }
  throw new Error(`no sample value for ${where}: add a candidate`);
}

/** What the daemon does to call arguments before their schema (null is left out; trailing ones dropped). */
function normalised(args: unknown[]): unknown[] {
  const a = args.map((x) => (x === null ? undefined : x));
  while (a.length > 0 && a[a.length - 1] === undefined) a.pop();
  return a;
}

/** A generated case: the request, and whether the shape must refuse it. */
interface Case {
  what: string;
  req: Req;
  refused: boolean;
  /** The start of the message of a refusal by shape. */
  prefix: string;
}

/** The cases of `POST /v1/call`, generated from the method table: each argument of each method as every JSON type, left out, and one too many. */
function callCases(): Case[] {
  const out: Case[] = [];
  for (const [name, m] of Object.entries(USER_METHODS)) {
    const items = (m.args as z.ZodTuple).def.items as z.ZodType[];
    const valid = items.map((it, i) => sample(it, `${name} argument ${i}`));
    const push = (what: string, args: unknown[]) =>
      out.push({
        what: `${name} ${what}`,
        req: { path: '/v1/call', body: { namespace: 'default', method: name, args } },
        refused: !m.args.safeParse(normalised(args)).success,
        prefix: `${name}: bad request:`,
      });
    push('well-formed', valid);
    for (let i = 0; i < items.length; i++) {
      for (const v of JSON_VALUES)
        push(
          `argument ${i} = ${JSON.stringify(v)}`,
          valid.map((x, j) => (j === i ? v : x)),
        );
      push(`argument ${i} and after left out`, valid.slice(0, i));
    }
    // one more than the method takes: every argument given (a defined sample), then an extra one
    const full = items.map((it, i) =>
      valid[i] === undefined ? (CANDIDATES.slice(1).find((c) => it.safeParse(c).success) ?? 'x') : valid[i],
    );
    for (const extra of ['extra', 0, {}]) push(`with an extra argument ${JSON.stringify(extra)}`, [...full, extra]);
  }
  return out;
}

/** The cases of every JSON endpoint: each field as every JSON type, left out, and bodies that are not objects. */
function endpointCases(): Case[] {
  const out: Case[] = [];
  for (const [route, schema] of Object.entries(USER_ENDPOINTS)) {
    if (!schema) continue;
    const path = route.split(' ')[1]!;
    const shape = (schema as z.ZodObject).shape as Record<string, z.ZodType>;
    const valid: Record<string, unknown> = {};
    for (const [k, s] of Object.entries(shape)) valid[k] = sample(s, `${route} ${k}`);
    const push = (what: string, body: unknown) =>
      out.push({
        what: `${route} ${what}`,
        req: { path, body },
        refused: !schema.safeParse(body).success,
        prefix: `${route}: bad request:`,
      });
    push('well-formed', valid);
    for (const k of Object.keys(shape)) {
      for (const v of JSON_VALUES) push(`${k} = ${JSON.stringify(v)}`, { ...valid, [k]: v });
      const { [k]: _, ...rest } = valid;
      push(`${k} left out`, rest);
    }
    for (const v of [null, true, 0, 'x', [], [valid]]) push(`body ${JSON.stringify(v)}`, v);
  }
  // the import's arguments travel in a header
  const shape = ImportArgs.shape as Record<string, z.ZodType>;
  for (const k of Object.keys(shape))
    for (const v of JSON_VALUES) {
      const args = { namespace: 'default', [k]: v };
      out.push({
        what: `POST /v1/import x-awc-args ${k} = ${JSON.stringify(v)}`,
        req: { path: '/v1/import', raw: '', headers: { 'x-awc-args': JSON.stringify(args) } },
        refused: !ImportArgs.safeParse(args).success,
        prefix: 'POST /v1/import x-awc-args: bad request:',
      });
    }
  return out;
}

/**
 * Issue 24 item 10: the root daemon checks the shape of every request of a per-user socket
 * before anything runs. Generated from the method table (src/daemon/users/user-methods.ts) and the
 * endpoint table (src/daemon/users/user-schemas.ts): each argument and field as every JSON type, left
 * out, one too many: what the shape refuses is E_USAGE saying so (nothing ran), and nothing is
 * ever E_INTERNAL.
 */
describe("the daemon checks every request's shape (issue 24 item 10)", { skip: usersAndOverlaySkip() }, () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-shapes-'));
  const home = join(work, 'home');
  let u: TestUser;
  let socket: string;

  /** Sends `cases` as the user; checks each answer. */
  const check = (cases: Case[]): void => {
    const file = join(work, `cases-${Math.random().toString(36).slice(2)}.json`);
    writeFileSync(file, JSON.stringify(cases.map((c) => c.req)), { mode: 0o644 });
    const r = u.run(process.execPath, ['-e', SEND, file, socket]);
    assert.equal(r.status, 0, r.stderr);
    const answers = JSON.parse(r.stdout) as { status: number; code?: string; message?: string }[];
    assert.equal(answers.length, cases.length);
    const wrong: string[] = [];
    cases.forEach((c, i) => {
      const a = answers[i]!;
      if (a.code === 'E_INTERNAL' || a.status === 0 || a.status >= 500) wrong.push(`${c.what}: ${a.code} ${a.message}`);
      else if (c.refused && !(a.code === 'E_USAGE' && a.message?.startsWith(c.prefix)))
        wrong.push(`${c.what}: expected a refusal by shape, got ${a.status} ${a.code} ${a.message}`);
      else if (!c.refused && a.message?.startsWith(c.prefix)) wrong.push(`${c.what}: a well-formed request refused: ${a.message}`);
    });
    assert.deepEqual(wrong, []);
  };

  before(() => {
    chmodSync(work, 0o755);
    u = createTestUser();
    mkdirSync(home, { mode: 0o700 });
    writeFileSync(join(home, 'config.json'), JSON.stringify({ users: [{ user: u.name, namespaces: ['default'] }] }));
    awcOk(home, ['daemon', 'start']);
    const src = join(work, 'src');
    mkdirSync(src);
    writeFileSync(join(src, 'a.txt'), 'a\n');
    awcOk(home, ['snapshot', 'import', src, '--name', 'base']);
    awcOk(home, ['fork', 'base', '--name', 'w']);
    socket = join(userSocketsDirOf({ home }), `${u.uid}.sock`);
  });

  after(() => {
    cleanupMounts(home, work);
    u?.remove();
    rmSync(work, { recursive: true, force: true });
  });

  test('every method callable through the daemon has an entry with a schema in the method table, and nothing else does', () => {
    assert.deepEqual(Object.keys(USER_METHODS).sort(), [...REMOTE_METHODS].sort());
    for (const [name, m] of Object.entries(USER_METHODS)) {
      assert.ok(m.args instanceof z.ZodTuple, `${name}: its arguments' schema is a tuple`);
      assert.equal((m.args as z.ZodTuple).def.rest, null, `${name}: takes no rest arguments`);
      assert.equal(typeof m.run, 'function', name);
    }
  });

  test('every method, each argument as every JSON type, left out, one too many: E_USAGE by shape, never E_INTERNAL; nothing ran', () => {
    const cases = callCases();
    // the generator is not empty: every argument of every method is refused in most of its variants
    for (const name of Object.keys(USER_METHODS)) {
      const own = cases.filter((c) => c.what.startsWith(`${name} `));
      assert.ok(own.filter((c) => c.refused).length >= 3, `${name}: ${own.length} cases, too few refused`);
      assert.ok(
        own.some((c) => !c.refused),
        `${name}: a well-formed call too`,
      );
    }
    const before = { ws: awcOk(home, ['ls']).workspaces.length, snaps: awcOk(home, ['snapshot', 'ls']).snapshots.length };
    check(cases);
    assert.deepEqual({ ws: awcOk(home, ['ls']).workspaces.length, snaps: awcOk(home, ['snapshot', 'ls']).snapshots.length }, before);
  });

  test('every endpoint, each field of its body as every JSON type, left out, and bodies that are not objects: E_USAGE by shape, never E_INTERNAL', () => {
    check(endpointCases());
  });

  test('hostile calls that reached a method unchecked are refused by shape', () => {
    const call = (method: string, args: unknown) => ({ path: '/v1/call', body: { namespace: 'default', method, args } });
    const cases: [Req, string][] = [
      [call('leases.show', [null]), 'leases.show'],
      [call('leases.show', [{ id: '../../../etc' }, 1]), 'leases.show'],
      [call('leases.list', ['w']), 'leases.list'],
      [call('checkpoint', ['w', { testHooks: 1, message: 5 }]), 'checkpoint'],
      [call('diff', [{}, 'w']), 'diff'],
      [call('getSnapshot', [7]), 'getSnapshot'],
      [call('listWorkspaces', ['w']), 'listWorkspaces'],
      [call('fork', ['base', { count: 'all' }]), 'fork'],
      [call('setLabels', ['w', 'k=v']), 'setLabels'],
      [call('doctor', ['extra']), 'doctor'],
      [call('getWorkspace', 'w'), 'POST /v1/call'],
    ];
    check(cases.map(([req, prefix]) => ({ what: JSON.stringify(req.body), req, refused: true, prefix: `${prefix}: bad request:` })));
  });
});
