import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, isAbsolute, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The documentation stays inside the repository: every relative markdown link in README.md,
 * docs/, the README.md files of src/'s folders, test/README.md and bench/*.md names a file (and, for a markdown file, a heading) that exists in the
 * repository, and no tracked file refers to a path of the machine it was written on.
 */

const root = fileURLToPath(new URL('../../..', import.meta.url));

/** Strings no tracked file may contain (built here so this file does not contain them). */
const FORBIDDEN = [['..', 'shared'].join('/'), ['', 'work', ''].join('/')];

/** The markdown files whose links are checked, relative to the repository root. */
function markdownFiles(): string[] {
  const out = ['README.md'];
  const walk = (dir: string): void => {
    for (const e of readdirSync(join(root, dir), { withFileTypes: true })) {
      const rel = `${dir}/${e.name}`;
      if (e.isDirectory()) walk(rel);
      else if (e.name.endsWith('.md')) out.push(rel);
    }
  };
  walk('docs');
  walk('src'); // the folders' README.md files
  out.push('test/README.md');
  for (const name of readdirSync(join(root, 'bench'))) if (name.endsWith('.md')) out.push(`bench/${name}`);
  return out;
}

/** Markdown text without fenced code blocks (headings and links there are neither). */
function withoutFences(md: string): string {
  return md.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, '');
}

/** Markdown text without fenced code blocks and inline code spans (links there are not links). */
function withoutCode(md: string): string {
  return withoutFences(md).replace(/`+[^`\n]*`+/g, '');
}

/** Link targets of a markdown text: inline `[text](target "title")`, images, and reference definitions `[x]: target`. */
function linkTargets(md: string): string[] {
  const text = withoutCode(md);
  const out: string[] = [];
  for (const m of text.matchAll(/\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)/g)) out.push(m[1]);
  for (const m of text.matchAll(/^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$/gm)) out.push(m[1]);
  return out;
}

/** GitHub's anchor of a heading: lower case, punctuation and symbols dropped, spaces to hyphens. */
function headingSlug(heading: string): string {
  const text = heading
    .replace(/`([^`]*)`/g, '$1')
    .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/[*_]{1,3}([^*_]+)[*_]{1,3}/g, '$1');
  return text
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\s_-]/gu, '')
    .replace(/ /g, '-');
}

/** The anchors a markdown text defines (its headings' slugs, numbered as GitHub does when repeated). */
function anchorsOf(md: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const m of withoutFences(md).matchAll(/^ {0,3}#{1,6}\s+(.+?)\s*#*\s*$/gm)) {
    const slug = headingSlug(m[1]);
    const n = seen.get(slug) ?? 0;
    seen.set(slug, n + 1);
    out.add(n === 0 ? slug : `${slug}-${n}`);
  }
  return out;
}

/**
 * What is wrong with the links of one markdown file (`file`: path relative to `repo`; `md`: its
 * text): a target outside the repository, an absolute path, a missing file, or a missing heading.
 */
function linkProblems(repo: string, file: string, md: string): string[] {
  const problems: string[] = [];
  for (const target of linkTargets(md)) {
    if (target === '' || /^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto:
    const [pathPart, anchor] = target.split('#', 2) as [string, string | undefined];
    let path: string;
    try {
      path = decodeURIComponent(pathPart);
    } catch {
      problems.push(`${file}: bad link ${target}`);
      continue;
    }
    if (isAbsolute(path)) {
      problems.push(`${file}: absolute path ${target}`);
      continue;
    }
    const abs = path === '' ? join(repo, file) : resolve(repo, dirname(file), path);
    const rel = relative(repo, abs);
    if (rel === '..' || rel.startsWith(`..${sep}`) || isAbsolute(rel)) {
      problems.push(`${file}: ${target} leaves the repository`);
      continue;
    }
    if (!existsSync(abs)) {
      problems.push(`${file}: ${target} does not exist`);
      continue;
    }
    if (anchor !== undefined && abs.endsWith('.md') && statSync(abs).isFile()) {
      if (!anchorsOf(readFileSync(abs, 'utf8')).has(anchor)) problems.push(`${file}: ${target}: no heading #${anchor} in ${rel}`);
    }
  }
  return problems;
}

/** Tracked files of the repository (every file outside node_modules, dist and .git when git is not there). */
function trackedFiles(): string[] {
  const r = spawnSync('git', ['ls-files', '-z'], { cwd: root, encoding: 'utf8' });
  if (r.status === 0) return r.stdout.split('\0').filter((f) => f !== '' && existsSync(join(root, f)));
  const out: string[] = [];
  const walk = (dir: string): void => {
    for (const e of readdirSync(join(root, dir), { withFileTypes: true })) {
      if (['node_modules', 'dist', '.git'].includes(e.name)) continue;
      const rel = dir === '' ? e.name : `${dir}/${e.name}`;
      if (e.isDirectory()) walk(rel);
      else if (e.isFile()) out.push(rel);
    }
  };
  walk('');
  return out;
}

/** Which forbidden strings a text contains. */
function outsideReferences(text: string): string[] {
  return FORBIDDEN.filter((s) => text.includes(s));
}

test('every relative link in README.md, docs/, src/, test/README.md and bench/*.md resolves inside the repository', () => {
  const files = markdownFiles();
  assert.ok(files.includes('docs/explanation/design.md') && files.includes('docs/explanation/architecture.md'), files.join(', '));
  const problems = files.flatMap((f) => linkProblems(root, f, readFileSync(join(root, f), 'utf8')));
  assert.deepEqual(problems, []);
});

test('no tracked file refers to a path outside the repository', () => {
  const files = trackedFiles();
  assert.ok(files.length > 50, `found only ${files.length} files`);
  const found = files.flatMap((f) => outsideReferences(readFileSync(join(root, f), 'utf8')).map((s) => `${f}: ${s}`));
  assert.deepEqual(found, []);
});

/** What is wrong with the docs a source text names (`docs/….md` or `docs/….md#heading`, in comments, hints or strings). */
function docReferenceProblems(repo: string, file: string, text: string): string[] {
  const problems: string[] = [];
  for (const m of text.matchAll(/(?<![\w./-])docs\/[\w./-]+\.md(?:#[\w-]+)?/g)) {
    const [path, anchor] = m[0].split('#', 2) as [string, string | undefined];
    if (!existsSync(join(repo, path))) problems.push(`${file}: ${m[0]} does not exist`);
    else if (anchor !== undefined && !anchorsOf(readFileSync(join(repo, path), 'utf8')).has(anchor))
      problems.push(`${file}: ${m[0]}: no heading #${anchor}`);
  }
  return problems;
}

test('every docs/….md page (and heading) that code, tests or benchmarks name exists', () => {
  const self = 'test/repo/docs-links.test.ts';
  const files = trackedFiles().filter((f) => /^(src|test|bench|scripts|smoke)\//.test(f) && /\.(ts|mjs|js|cjs)$/.test(f) && f !== self);
  assert.ok(files.length > 50, `found only ${files.length} files`);
  const problems = files.flatMap((f) => docReferenceProblems(root, f, readFileSync(join(root, f), 'utf8')));
  assert.deepEqual(problems, []);
  // and it can fail
  assert.equal(docReferenceProblems(root, 'x.ts', '// see docs/nothing-here.md and docs/explanation/design.md#no-such-heading').length, 2);
  assert.deepEqual(docReferenceProblems(root, 'x.ts', "hint: 'see docs/reference/formats.md#pack-version-1.'"), []);
});

test('the link check fails on links that leave the repository, are missing, or name a missing heading', () => {
  const bad = [
    `[brief](${FORBIDDEN[0]}/DESIGN.md)`,
    '[up](../../outside.md)',
    '[abs](/etc/passwd)',
    '[gone](docs/no-such-page.md)',
    '[heading](docs/explanation/design.md#no-such-heading)',
    '[ref]: docs/also-missing.md',
  ].join('\n\n');
  const problems = linkProblems(root, 'README.md', bad);
  assert.equal(problems.length, 6, problems.join('\n'));
  // and passes good ones: files, directories, headings, external URLs, links in code
  const good = [
    '[formats](docs/reference/formats.md)',
    '[pack](docs/reference/formats.md#pack-version-1)',
    '[folder](docs/)',
    '[site](https://example.com/x)',
    '[self](#the-commands)',
    '`[not a link](../nowhere.md)`',
    '```\n[nor this](../nowhere.md)\n```',
  ].join('\n\n');
  assert.deepEqual(linkProblems(root, 'README.md', good), []);
  assert.deepEqual(outsideReferences(`see ${FORBIDDEN[1]}main and ${FORBIDDEN[0]}`), FORBIDDEN);
});

test('heading anchors follow GitHub: punctuation dropped, spaces to hyphens, repeats numbered', () => {
  assert.equal(headingSlug('Pack, version 1'), 'pack-version-1');
  assert.equal(headingSlug('`export --dir` writes beside the target (issue 7)'), 'export---dir-writes-beside-the-target-issue-7');
  assert.equal(headingSlug('Object store key layout'), 'object-store-key-layout');
  assert.deepEqual([...anchorsOf('# A\n## A\n```\n# not\n```\n### B!\n## `c.d` e\n')], ['a', 'a-1', 'b', 'cd-e']);
});

/** Repository paths (`src/…`, `test/…`, `bench/…`, `scripts/…`, `smoke/…` with an extension) a markdown text names that do not exist. */
function missingSourcePaths(repo: string, file: string, md: string): string[] {
  const out: string[] = [];
  for (const m of withoutFences(md).matchAll(/(?<![\w/.<>-])((?:src|test|bench|scripts|smoke)\/[\w./-]+\.(?:ts|mjs|md|json))\b/g))
    if (!existsSync(join(repo, m[1]))) out.push(`${file}: names ${m[1]}, which does not exist`);
  return [...new Set(out)];
}

test('every source path the docs name exists (moved files leave no stale path behind)', () => {
  const problems = markdownFiles().flatMap((f) => missingSourcePaths(root, f, readFileSync(join(root, f), 'utf8')));
  assert.deepEqual(problems, []);
  // and the check can fail
  assert.deepEqual(missingSourcePaths(root, 'x.md', 'see `src/host/no-such-file.ts` and src/core/errors.ts'), [
    'x.md: names src/host/no-such-file.ts, which does not exist',
  ]);
});
