import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';

const root = fileURLToPath(new URL('../..', import.meta.url));
const bin = (name: string): string => join(root, 'node_modules', '.bin', name);

/** Runs a linter from the repository root; returns its status and output. */
function run(name: string, args: string[]): { status: number | null; out: string } {
  const r = spawnSync(bin(name), args, { cwd: root, encoding: 'utf8', timeout: 120_000 });
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

/** ESLint (recommended sets of ESLint and typescript-eslint, eslint.config.js) reports nothing. */
test('eslint passes', () => {
  const r = run('eslint', ['--max-warnings=0', '.']);
  assert.equal(r.status, 0, r.out);
});

/** Every source, test, benchmark and config file is formatted as .prettierrc.json says. */
test('prettier --check passes', () => {
  const r = run('prettier', ['--check', '.']);
  assert.equal(r.status, 0, r.out);
});

/** The linters catch what they claim: a file with an unused variable and bad formatting fails both. */
test('the linters fail on a bad file', () => {
  const bad = 'const  unused = 1\nexport const x = "a"\n';
  const e = spawnSync(bin('eslint'), ['--stdin', '--stdin-filename', 'src/core/bad.ts'], { cwd: root, input: bad, encoding: 'utf8' });
  assert.equal(e.status, 1, e.stdout + e.stderr);
  assert.match(e.stdout, /no-unused-vars/);
  const p = spawnSync(bin('prettier'), ['--check', '--stdin-filepath', 'src/core/bad.ts'], { cwd: root, input: bad, encoding: 'utf8' });
  assert.notEqual(p.status, 0);
});
