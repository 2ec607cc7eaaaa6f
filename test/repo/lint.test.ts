import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';

const root = fileURLToPath(new URL('../../..', import.meta.url));
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

/** The layering rule (.dependency-cruiser.cjs): no folder of src/ imports one above it or a sibling, and no import circles. */
test('the layering rule holds (dependency-cruiser)', () => {
  const r = run('depcruise', ['src', '--config', '.dependency-cruiser.cjs']);
  assert.equal(r.status, 0, r.out);
});

/** The layering check catches what it claims: an import upwards, between siblings, and a circle in a copy of the rule. */
test('the layering check fails on a layer that imports one above it, a sibling, a later or sibling feature folder, or a circle', () => {
  const dir = mkdtempSync(join(tmpdir(), 'awc-layering-'));
  try {
    const write = (path: string, text: string): void => {
      mkdirSync(dirname(join(dir, path)), { recursive: true });
      writeFileSync(join(dir, path), text);
    };
    copyFileSync(join(root, 'tsconfig.json'), join(dir, 'tsconfig.json'));
    write('src/service/high.ts', 'export const high = 1;\n');
    write('src/host/side.ts', 'export const side = 1;\n');
    write('src/core/ok.ts', 'export const ok = 1;\n');
    write('src/store/fine.ts', "import { ok } from '../core/ok.js';\nexport const fine = ok;\n");
    const check = (): { status: number | null; out: string } => {
      const r = spawnSync(bin('depcruise'), ['src', '--config', join(root, '.dependency-cruiser.cjs')], { cwd: dir, encoding: 'utf8' });
      return { status: r.status, out: `${r.stdout}${r.stderr}` };
    };
    assert.equal(check().status, 0, 'a tree that keeps the rule passes');
    write('src/core/low.ts', "import { high } from '../service/high.js';\nexport const low = high;\n");
    let r = check();
    assert.notEqual(r.status, 0, r.out);
    assert.match(r.out, /core-imports-above/);
    rmSync(join(dir, 'src/core/low.ts'));
    write('src/catalog/peer.ts', "import { side } from '../host/side.js';\nexport const peer = side;\n");
    r = check();
    assert.notEqual(r.status, 0, r.out);
    assert.match(r.out, /catalog-imports-above/);
    rmSync(join(dir, 'src/catalog/peer.ts'));
    write('src/service/refs/low.ts', 'export const low = 1;\n');
    write('src/service/claude/top.ts', "import { low } from '../refs/low.js';\nexport const top = low;\n");
    assert.equal(check().status, 0, 'a later feature folder may import an earlier one');
    write('src/service/refs/up.ts', "import { top } from '../claude/top.js';\nexport const up = top;\n");
    r = check();
    assert.notEqual(r.status, 0, r.out);
    assert.match(r.out, /service-refs-imports-later-feature/);
    rmSync(join(dir, 'src/service/refs/up.ts'));
    write('src/service/attach/side.ts', "import { top } from '../claude/top.js';\nexport const side = top;\n");
    r = check();
    assert.notEqual(r.status, 0, r.out);
    assert.match(r.out, /service-attach-imports-later-feature/);
    rmSync(join(dir, 'src/service/attach/side.ts'));
    write('src/store/a.ts', "import { b } from './b.js';\nexport const a = () => b;\n");
    write('src/store/b.ts', "import { a } from './a.js';\nexport const b = () => a;\n");
    r = check();
    assert.notEqual(r.status, 0, r.out);
    assert.match(r.out, /no-circular/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

/** ESLint's function rules hold in src/: a function of 81 lines, or blocks nested 5 deep, fail; 80 lines and 4 deep pass. */
test('eslint fails on a function over 80 lines and on blocks nested 5 deep', () => {
  const lint = (text: string): { status: number | null; out: string } => {
    const r = spawnSync(bin('eslint'), ['--stdin', '--stdin-filename', 'src/core/long.ts'], { cwd: root, input: text, encoding: 'utf8' });
    return { status: r.status, out: r.stdout + r.stderr };
  };
  const fn = (n: number): string => `export function f(): number {\n  let x = 0;\n${'  x++;\n'.repeat(n - 4)}  return x;\n}\n`;
  assert.equal(lint(fn(80)).status, 0, lint(fn(80)).out);
  const long = lint(fn(81));
  assert.equal(long.status, 1, long.out);
  assert.match(long.out, /max-lines-per-function/);
  const nest = (d: number): string =>
    `export function g(a: boolean): number {\n${'  if (a) {\n'.repeat(d)}  return 1;\n${'  }\n'.repeat(d)}  return 0;\n}\n`;
  assert.equal(lint(nest(4)).status, 0, lint(nest(4)).out);
  const deep = lint(nest(5));
  assert.equal(deep.status, 1, deep.out);
  assert.match(deep.out, /max-depth/);
});

/** No source file over 800 lines (as formatted: prettier --check above holds). */
test('no file under src/ is over 800 lines', () => {
  const over: string[] = [];
  const walk = (rel: string): void => {
    for (const e of readdirSync(join(root, rel), { withFileTypes: true })) {
      const p = `${rel}/${e.name}`;
      if (e.isDirectory()) walk(p);
      else if (e.name.endsWith('.ts')) {
        const text = readFileSync(join(root, p), 'utf8');
        const lines = text.split('\n').length - (text.endsWith('\n') ? 1 : 0);
        if (lines > 800) over.push(`${p}: ${lines} lines`);
      }
    }
  };
  walk('src');
  assert.deepEqual(over, []);
});
