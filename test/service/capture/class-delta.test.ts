/**
 * Issue 26: a checkpoint counts files, bytes and classes at the cost of what changed
 * (src/service/capture/class-delta.ts, tree-stats.ts diffCounts). Property (fast-check):
 * for a random tree and a random set of changes to it (files written, removed, resized,
 * directories removed or replaced by files, `.gitignore` files added, changed or removed,
 * `node_modules` directories), each imported into a real store, the head's counts plus the
 * delta equal a whole count of the changed tree, and storedClasses with the head as its
 * prior gives the same as a whole walk. Also: the class-count cache ignores other policies
 * and bad files, and its sweep keeps live roots only.
 */
import { strict as assert } from 'node:assert';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import fc from 'fast-check';
import { Awc } from '../../../src/service/workspace/awc.js';
import type { Digest } from '../../../src/core/digest.js';
import { CapturePolicy, parseProjectConfig } from '../../../src/service/capture/capture-policy.js';
import { countStoredClasses, storedClasses } from '../../../src/service/capture/capture-classes.js';
import { diffClasses, addStoredCounts } from '../../../src/service/capture/class-delta.js';
import { ClassCountCache, policyKey } from '../../../src/service/capture/class-cache.js';
import { countRoot, diffRootCounts } from '../../../src/service/capture/tree-stats.js';

const name = fc.constantFrom('n0', 'n1', 'q0', 'q1', 'w0', 'node_modules', 'lib');
const IGNORES = ['q*\n', 'w0/\n', 'n1\n!n1/keep\n', 'lib/\n', '*.js\n', ''];

type Node = { kind: 'file'; size: number } | { kind: 'ignore'; text: string } | { kind: 'dir'; children: Record<string, Node> };

const tree: fc.Arbitrary<Record<string, Node>> = fc.letrec<{ dir: Record<string, Node>; node: Node }>((tie) => ({
  dir: fc.dictionary(name, tie('node'), { maxKeys: 5 }),
  node: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    fc.record({ kind: fc.constant('file' as const), size: fc.nat(3000) }),
    tie('dir').map((children) => ({ kind: 'dir' as const, children })),
  ),
})).dir;

/** A change at the `pick`-th directory of the tree (modulo their count). */
const change = fc.oneof(
  fc.record({ op: fc.constant('write' as const), pick: fc.nat(), n: name, size: fc.nat(3000) }),
  fc.record({ op: fc.constant('rm' as const), pick: fc.nat(), n: name }),
  fc.record({ op: fc.constant('ignore' as const), pick: fc.nat(), text: fc.constantFrom(...IGNORES) }),
  fc.record({ op: fc.constant('unignore' as const), pick: fc.nat() }),
  fc.record({ op: fc.constant('mkdir' as const), pick: fc.nat(), n: name }),
);
type Change = typeof change extends fc.Arbitrary<infer T> ? T : never;

function build(dir: string, nodes: Record<string, Node>, seed = 0): void {
  for (const [n, node] of Object.entries(nodes)) {
    const p = join(dir, n);
    if (node.kind === 'file') writeFileSync(p, Buffer.alloc(node.size, seed + n.length));
    else if (node.kind === 'ignore') writeFileSync(p, node.text);
    else {
      mkdirSync(p);
      build(p, node.children, seed + 1);
    }
  }
}

function dirsOf(root: string, rel = ''): string[] {
  const out = [rel];
  for (const n of readdirSync(join(root, rel)).sort()) {
    const r = rel ? `${rel}/${n}` : n;
    if (statSync(join(root, r)).isDirectory()) out.push(...dirsOf(root, r));
  }
  return out;
}

function apply(root: string, c: Change): void {
  const dirs = dirsOf(root);
  const d = join(root, dirs[c.pick % dirs.length]!);
  try {
    if (c.op === 'write') writeFileSync(join(d, c.n), Buffer.alloc(c.size, 7));
    else if (c.op === 'rm') rmSync(join(d, c.n), { recursive: true, force: true });
    else if (c.op === 'ignore') writeFileSync(join(d, '.gitignore'), c.text);
    else if (c.op === 'unignore') rmSync(join(d, '.gitignore'), { force: true });
    else mkdirSync(join(d, c.n, 'w0'), { recursive: true });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (!['EEXIST', 'EISDIR', 'ENOTDIR'].includes(code ?? '')) throw err;
  }
}

describe('counts and classes of a changed tree cost only what changed', () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-class-delta-'));
  let awc: Awc;
  const policy = new CapturePolicy(parseProjectConfig(undefined), { dropScratch: true });
  before(async () => {
    awc = await Awc.open({ home: join(work, 'home'), mountDriver: 'copy' });
  });
  after(async () => {
    await awc.close();
    rmSync(work, { recursive: true, force: true });
  });

  const importDir = async (dir: string): Promise<Digest> => (await awc.importSnapshot(dir, { recordPath: false })).root as Digest;

  test('head counts + delta = a whole count, for random trees and changes (property)', { timeout: 5 * 60_000 }, async () => {
    let run = 0;
    await fc.assert(
      fc.asyncProperty(
        tree,
        fc.array(change, { minLength: 1, maxLength: 8 }),
        fc.constantFrom(...IGNORES),
        async (t, changes, rootIgnore) => {
          const dir = join(work, `run${run++}`);
          mkdirSync(dir);
          build(dir, { ...t, '.gitignore': { kind: 'ignore', text: rootIgnore } });
          const before = await importDir(dir);
          for (const c of changes) apply(dir, c);
          const afterRoot = await importDir(dir);
          rmSync(dir, { recursive: true, force: true });
          const reader = awc.reader();
          const [a, b, d] = await Promise.all([
            countRoot(reader, before),
            countRoot(reader, afterRoot),
            diffRootCounts(reader, before, afterRoot),
          ]);
          assert.deepEqual({ files: a.files + d.files, bytes: a.bytes + d.bytes }, b, 'files and bytes');
          const [ca, cb] = [await countStoredClasses(reader, before, policy), await countStoredClasses(reader, afterRoot, policy)];
          const delta = await diffClasses(reader, before, afterRoot, policy);
          assert.ok(
            delta !== undefined || changes.some((c) => c.op === 'ignore' || c.op === 'unignore'),
            'a delta unless the root .gitignore changed',
          );
          if (delta) assert.deepEqual(addStoredCounts(ca, delta), cb, 'classes');
          const viaPrior = await storedClasses(reader, afterRoot, policy, {
            prior: { root: before, classes: async () => ({ key: policyKey(policy), ...ca }) },
          });
          assert.deepEqual(viaPrior.stored, { key: policyKey(policy), ...cb }, 'storedClasses from the prior');
        },
      ),
      { numRuns: 60 },
    );
  });

  test('the cache: a miss for another policy or a bad file; the sweep keeps live roots and drops the rest', async () => {
    const dir = join(work, 'cache');
    const cache = new ClassCountCache(dir);
    const root = `sha256:${'a'.repeat(64)}` as Digest;
    const dead = `sha256:${'b'.repeat(64)}` as Digest;
    const counts = { durable: { files: 1, bytes: 2 }, reconstructible: { files: 3, bytes: 4 }, ignored: { files: 0, bytes: 0 } };
    await cache.put(root, 'k1', counts);
    await cache.put(dead, 'k1', counts);
    assert.deepEqual(await cache.get(root, 'k1'), counts);
    assert.equal(await cache.get(root, 'k2'), undefined, 'another policy');
    assert.equal(statSync(join(dir, `${'a'.repeat(64)}.json`)).mode & 0o777, 0o600);
    assert.equal(statSync(dir).mode & 0o777, 0o700);
    writeFileSync(join(dir, `${'c'.repeat(64)}.json`), '{not json');
    assert.equal(await cache.get(`sha256:${'c'.repeat(64)}` as Digest, 'k1'), undefined, 'a bad file is a miss');
    assert.equal(await cache.sweep(async () => new Set([root]), true), 2, 'a dry run counts');
    assert.equal(readdirSync(dir).length, 3, 'and removes nothing');
    assert.equal(await cache.sweep(async () => new Set([root])), 2);
    assert.deepEqual(readdirSync(dir), [`${'a'.repeat(64)}.json`]);
  });
});
