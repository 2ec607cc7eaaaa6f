import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { CLI, PROJECT, awc } from '../../helpers/cli.js';
import { tempDirFor } from '../../helpers/temp-dir.js';

// The CLI runs as a minified bundle (scripts/bundle-cli.mjs): an E_INTERNAL report must still name the
// TypeScript sources (src/cli/output/bundle-stack.ts maps its stack through the bundle's source maps).

test('an E_INTERNAL stack from the bundled CLI names src/*.ts files and lines, not dist/cli chunks', async (t) => {
  const dir = await tempDirFor(t, 'awc-stack-');
  const home = join(dir, 'home');
  const src = join(dir, 'src');
  mkdirSync(src);
  writeFileSync(join(src, 'a.txt'), 'a\n');
  assert.equal(awc(home, ['snapshot', 'import', src, '--name', 'base']).code, 0);
  assert.equal(awc(home, ['fork', 'base']).code, 0);
  // fault injection: the first write to stdout (Output.result printing the list) throws a plain TypeError, a bug as AWC sees it
  const inject = join(dir, 'inject.mjs');
  writeFileSync(
    inject,
    `const w = process.stdout.write.bind(process.stdout); let n = 0;
process.stdout.write = (...a) => { if (n++ === 0) throw new TypeError('injected'); return w(...a); };\n`,
  );
  const r = spawnSync(process.execPath, ['--import', inject, CLI, '--home', home, 'ls'], { encoding: 'utf8' });
  assert.equal(r.status, 1, r.stderr);
  assert.match(r.stderr, /E_INTERNAL: injected/);
  const frames = r.stderr.split('\n').filter((l) => /^\s+at /.test(l));
  assert.ok(
    frames.some((f) => f.includes(join(PROJECT, 'src', 'cli', 'output', 'output.ts') + ':')),
    `a frame names src/cli/output/output.ts:\n${r.stderr}`,
  );
  assert.ok(
    frames.some((f) => f.includes(join(PROJECT, 'src', 'cli', 'entry', 'main.ts') + ':')),
    r.stderr,
  );
  assert.deepEqual(
    frames.filter((f) => f.includes('/dist/cli/')),
    [],
    'no frame is left pointing into the bundle',
  );
});
