import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { CLI, PROJECT, awc } from '../../helpers/cli.js';
import { tempDirFor } from '../../helpers/temp-dir.js';

// CLI latency (issue 10 item 7, docs/explanation/cli-latency.md): which packages a command loads,
// recorded by a module loader hook. A correctness test (what loads), never a timing one. The CLI is
// bundled (scripts/bundle-cli.mjs): a bundle file that loads counts as loading every package it holds
// (dist/cli/manifest.json), a package loaded from node_modules counts as itself.

/** What each bundle file holds (scripts/bundle-cli.mjs writes it). */
const MANIFEST = JSON.parse(readFileSync(join(PROJECT, 'dist', 'cli', 'manifest.json'), 'utf8')) as Record<string, { packages: string[] }>;

/** Libraries that cost tens to hundreds of ms to load: no module the CLI loads at start may import one. */
const HEAVY = [
  '@aws-sdk/',
  'pg',
  'kysely',
  'better-sqlite3',
  'diff',
  'tar-stream',
  'prom-client',
  'zod',
  '@modelcontextprotocol/',
  'koffi',
  'lz4-napi',
];

const HOOKS = `import { appendFileSync } from 'node:fs';
export async function load(url, context, next) {
  const r = await next(url, context);
  appendFileSync(process.env.AWC_TEST_LOADED, url + '\\n');
  return r;
}
export async function resolve(specifier, context, next) {
  const r = await next(specifier, context);
  appendFileSync(process.env.AWC_TEST_LOADED, r.url + '\\n');
  return r;
}
`;

/** The packages `awc args…` loads, through ESM import or require, from node_modules or inside a bundle file; `bundle` gets the bundle files. */
function packagesLoaded(dir: string, home: string, args: string[], n: number, bundle: Set<string> = new Set()): Set<string> {
  const record = join(dir, `loaded-${n}.txt`);
  writeFileSync(record, '');
  const hooks = join(dir, 'hooks.mjs');
  const reg = join(dir, 'register.mjs');
  writeFileSync(hooks, HOOKS);
  writeFileSync(reg, `import { register } from 'node:module';\nregister(${JSON.stringify(pathToFileURL(hooks).href)});\n`);
  // require() inside CommonJS packages: Module._load sees every one
  const cjs = join(dir, 'cjs.cjs');
  writeFileSync(
    cjs,
    `const M = require('node:module'); const fs = require('node:fs'); const load = M._load;
M._load = function (req, parent, isMain) { try { fs.appendFileSync(process.env.AWC_TEST_LOADED, M._resolveFilename(req, parent, isMain) + '\\n'); } catch {} return load.apply(this, arguments); };\n`,
  );
  const r = spawnSync(process.execPath, ['--require', cjs, '--import', reg, CLI, '--home', home, ...args], {
    encoding: 'utf8',
    env: { ...process.env, AWC_TEST_LOADED: record },
  });
  assert.equal(r.status, 0, r.stderr);
  const names = new Set<string>();
  for (const line of readFileSync(record, 'utf8').split('\n')) {
    const m = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(line);
    if (m) names.add(m[1]);
    const b = /\/dist\/cli\/([^/]+\.js)$/.exec(line);
    if (b) {
      assert.ok(MANIFEST[b[1]], `${b[1]} is in dist/cli/manifest.json`);
      bundle.add(b[1]);
      for (const p of MANIFEST[b[1]].packages) names.add(p);
    }
  }
  return names;
}

function heavyIn(names: Set<string>, allowed: string[] = []): string[] {
  return [...names].filter((n) => HEAVY.some((h) => (h.endsWith('/') ? n.startsWith(h) : n === h)) && !allowed.includes(n));
}

test('CLI start: the bundle runs; --version, ls --help, fork --help and completion bash load no heavy library; ls and fork on a home load only their catalog adapter', async (t) => {
  const dir = await tempDirFor(t, 'awc-lazy-');
  const home = join(dir, 'home');
  const src = join(dir, 'src');
  mkdirSync(src);
  writeFileSync(join(src, 'a.txt'), 'a\n');

  const files = new Set<string>();
  const version = packagesLoaded(dir, home, ['--version'], 1, files);
  assert.ok(files.has('awc.js'), 'the CLI runs its bundle (dist/cli/awc.js)');
  assert.ok(version.has('commander'), 'the hook records packages (commander is loaded, from the bundle)');
  assert.deepEqual(heavyIn(version), []);
  assert.deepEqual(heavyIn(packagesLoaded(dir, home, ['ls', '--help'], 2)), []);
  assert.deepEqual(heavyIn(packagesLoaded(dir, home, ['fork', '--help'], 3)), []);
  assert.deepEqual(heavyIn(packagesLoaded(dir, home, ['completion', 'bash'], 10)), [], 'awc completion opens nothing');

  assert.equal(awc(home, ['snapshot', 'import', src, '--name', 'base']).code, 0);
  assert.equal(awc(home, ['fork', 'base']).code, 0);
  // a SQLite catalog on a file: store: kysely and better-sqlite3, and nothing for PostgreSQL, S3, metrics, MCP or FUSE
  // (and none of the libraries only import, export, diff, checkpoint or a FUSE mount need: lz4-napi, fs-xattr, tar-stream, diff, ignore)
  const unneeded = [
    'pg',
    '@aws-sdk/client-s3',
    'prom-client',
    'zod',
    '@modelcontextprotocol/sdk',
    'koffi',
    'lz4-napi',
    'fs-xattr',
    'tar-stream',
    'streamx',
    'diff',
    'ignore',
  ];
  for (const [i, args] of [['ls'], ['fork', 'base']].entries()) {
    const loaded = packagesLoaded(dir, home, args, 4 + i);
    assert.ok(loaded.has('better-sqlite3') && loaded.has('kysely'), `awc ${args[0]} opens the SQLite catalog`);
    for (const p of unneeded) assert.ok(!loaded.has(p), `awc ${args[0]} loads ${p}`);
  }
});
