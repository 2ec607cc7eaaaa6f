import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The house is shown: docs/explanation/architecture.md has one table row per folder of src/
 * (recursively), every such folder has a README.md, and every folder architecture.md names
 * (`src/…`, or a layer path such as `service/import` in backticks) exists.
 */

const root = fileURLToPath(new URL('../../..', import.meta.url));

/** The page that describes the folders, relative to the repository root. */
const ARCHITECTURE = 'docs/explanation/architecture.md';

/** The layers of src/ (.dependency-cruiser.cjs). */
const LAYERS = ['core', 'config', 'store', 'catalog', 'host', 'drivers', 'service', 'daemon', 'cli'];

/** Every folder below `<repo>/src`, as `src/a/b`, sorted. */
export function srcFolders(repo: string): string[] {
  const out: string[] = [];
  const walk = (rel: string): void => {
    for (const e of readdirSync(join(repo, rel), { withFileTypes: true })) {
      if (!e.isDirectory()) continue;
      out.push(`${rel}/${e.name}`);
      walk(`${rel}/${e.name}`);
    }
  };
  walk('src');
  return out.sort();
}

/** The folders a table row of `md` is about: rows whose first cell is `` `src/…` `` (a trailing `/` allowed). */
export function rowFolders(md: string): string[] {
  return [...md.matchAll(/^\|\s*`(src(?:\/[\w-]+)+)\/?`\s*\|/gm)].map((m) => m[1]);
}

/**
 * Every folder `md` names: a `src/a/b` path without a file extension anywhere in the text, and a
 * code span that is a layer path (`` `service/import` ``, `` `host/fuse/` ``), read as below src/.
 */
export function namedFolders(md: string): string[] {
  const out = new Set<string>();
  for (const m of md.matchAll(/(?<![\w./-])(src(?:\/[\w-]+)+)\/?(?![\w./-])/g)) out.add(m[1]);
  const layer = new RegExp(`^(?:src/)?((?:${LAYERS.join('|')})(?:/[\\w-]+)*)/?$`);
  for (const m of md.matchAll(/`([^`\n]+)`/g)) {
    const hit = layer.exec(m[1]);
    if (hit) out.add(`src/${hit[1]}`);
  }
  return [...out].sort();
}

/** The source files `md` names in code spans as layer paths without `src/` (`` `service/import/import-snapshot.ts` ``), as `src/…`. */
export function namedLayerFiles(md: string): string[] {
  const layer = new RegExp(`^((?:${LAYERS.join('|')})(?:/[\\w-]+)*/[\\w.-]+\\.(?:ts|md|json))$`);
  const out = new Set<string>();
  for (const m of md.matchAll(/`([^`\n]+)`/g)) {
    const hit = layer.exec(m[1]);
    if (hit) out.add(`src/${hit[1]}`);
  }
  return [...out].sort();
}

/**
 * What is wrong with the repository at `repo`: folders without a row or a README.md, named
 * folders that do not exist, and files named as layer paths (`` `host/fuse/protocol.ts` ``)
 * that do not exist (`src/…` files are the docs link check's, test/repo/docs-links.test.ts).
 */
export function architectureProblems(repo: string): string[] {
  const md = readFileSync(join(repo, ARCHITECTURE), 'utf8');
  const folders = srcFolders(repo);
  const rows = new Set(rowFolders(md));
  const problems: string[] = [];
  for (const f of folders) {
    if (!rows.has(f)) problems.push(`${f} has no row in ${ARCHITECTURE}`);
    if (!existsSync(join(repo, f, 'README.md'))) problems.push(`${f} has no README.md`);
  }
  for (const f of namedFolders(md)) {
    const abs = join(repo, f);
    if (!existsSync(abs) || !statSync(abs).isDirectory()) problems.push(`${ARCHITECTURE} names ${f}, which is not a folder`);
  }
  for (const f of namedLayerFiles(md)) if (!existsSync(join(repo, f))) problems.push(`${ARCHITECTURE} names ${f}, which does not exist`);
  return problems;
}

test('architecture.md has a row for every folder of src/, each folder a README.md, and names no folder that is not there', () => {
  const folders = srcFolders(root);
  assert.ok(folders.length > 40 && folders.includes('src/host/read-path'), folders.join(', '));
  assert.deepEqual(architectureProblems(root), []);
  assert.ok(existsSync(join(root, 'test', 'README.md')), 'test/README.md explains the mirror of src/');
});

test('the check fails on a planted folder without a row or README, and on a row for a folder that is gone', () => {
  const repo = mkdtempSync(join(tmpdir(), 'awc-arch-'));
  try {
    mkdirSync(join(repo, 'docs', 'explanation'), { recursive: true });
    for (const f of ['src/core', 'src/service', 'src/service/import']) {
      mkdirSync(join(repo, f), { recursive: true });
      writeFileSync(join(repo, f, 'README.md'), '# x\n');
    }
    writeFileSync(join(repo, 'src', 'service', 'import', 'import-snapshot.ts'), '');
    const md = [
      '| folder | owns |',
      '|---|---|',
      '| `src/core` | x |',
      '| `src/service/` | x |',
      '| `src/service/import` | `service/import/import-snapshot.ts` |',
      '',
    ].join('\n');
    writeFileSync(join(repo, ARCHITECTURE), md);
    assert.deepEqual(architectureProblems(repo), []);
    // a planted folder: no row, no README
    mkdirSync(join(repo, 'src', 'service', 'planted'));
    assert.deepEqual(architectureProblems(repo), [
      `src/service/planted has no row in ${ARCHITECTURE}`,
      'src/service/planted has no README.md',
    ]);
    rmSync(join(repo, 'src', 'service', 'planted'), { recursive: true });
    // a folder that is gone, named in a row, in text and in a code span; a file that is gone
    writeFileSync(
      join(repo, ARCHITECTURE),
      `${md}| \`src/store/gone\` | x |\n\nsee src/host/nothing/, \`drivers/none\` and \`service/import/gone.ts\`.\n`,
    );
    assert.deepEqual(architectureProblems(repo), [
      `${ARCHITECTURE} names src/drivers/none, which is not a folder`,
      `${ARCHITECTURE} names src/host/nothing, which is not a folder`,
      `${ARCHITECTURE} names src/store/gone, which is not a folder`,
      `${ARCHITECTURE} names src/service/import/gone.ts, which does not exist`,
    ]);
  } finally {
    rmSync(repo, { recursive: true, force: true });
  }
});

test('files are not folders: a path with an extension is checked as a file', () => {
  assert.deepEqual(namedFolders('`src/store/pack/pack.ts`, src/core/errors.ts, `service/import/import-snapshot.ts`, `cli/entry`'), [
    'src/cli/entry',
  ]);
  assert.deepEqual(namedLayerFiles('`src/store/pack/pack.ts`, `service/import/import-snapshot.ts`, `cli/entry`, `a/b.ts`'), [
    'src/service/import/import-snapshot.ts',
  ]);
  assert.deepEqual(rowFolders('| `src/a/b/` | x |\n| `src/c` | y |\n| not a row `src/d` |\n'), ['src/a/b', 'src/c']);
});
