import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { cleanupMounts, CLI } from '../helpers/cli.js';
import { parseDocPage, pageScript, type DocPage } from '../helpers/doc-blocks.js';
import { freshDatabaseFor } from '../helpers/postgres.js';
import { freshBucket } from '../helpers/s3.js';
import { tempDirFor } from '../helpers/temp-dir.js';

/**
 * Every command block of a tutorial or how-to marked runnable (test/helpers/doc-blocks.ts)
 * runs, in page order, against the built CLI: `awc` on PATH, a fresh `HOME` (so `~/…` paths
 * of a page are the test's own) and a fresh `AWC_HOME`; a page marked `fleet` gets a fresh
 * PostgreSQL database and S3 bucket of the test servers. A block that fails fails the test
 * with the page's line and the output.
 */

const root = fileURLToPath(new URL('../../..', import.meta.url));
const KINDS = ['docs/tutorials', 'docs/how-to'];

/** The pages of the two kinds, relative to the repository root. */
function pages(): string[] {
  return KINDS.flatMap((d) =>
    readdirSync(join(root, d))
      .filter((f) => f.endsWith('.md'))
      .sort()
      .map((f) => `${d}/${f}`),
  );
}

/** Runs one page's steps in a fresh directory; fails with the line of the step that failed. */
async function runPage(t: { after(fn: () => Promise<void>): void }, name: string, page: DocPage): Promise<void> {
  const work = await tempDirFor(t, 'awc-doc-');
  const bin = join(work, 'bin');
  mkdirSync(bin);
  writeFileSync(join(bin, 'awc'), `#!/bin/sh\nexec '${process.execPath}' '${CLI}' "$@"\n`, { mode: 0o755 });
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    HOME: join(work, 'user'),
    AWC_HOME: join(work, 'awc-home'),
    PATH: `${bin}:${process.env.PATH}`,
    GIT_AUTHOR_NAME: 'Doc Reader',
    GIT_AUTHOR_EMAIL: 'reader@example.com',
    GIT_COMMITTER_NAME: 'Doc Reader',
    GIT_COMMITTER_EMAIL: 'reader@example.com',
    npm_config_update_notifier: 'false',
  };
  mkdirSync(env.HOME!);
  if (page.fleet) {
    const db = await freshDatabaseFor(t);
    const bucket = await freshBucket(t);
    Object.assign(env, bucket.env, { AWC_CATALOG: db.url, AWC_OBJECT_STORE: bucket.url('awc/') });
  }
  const stepFile = join(work, 'step');
  const script = join(work, 'page.sh');
  writeFileSync(script, pageScript(page, stepFile));
  const r = spawnSync('bash', [script], { cwd: env.HOME, env, encoding: 'utf8', timeout: 10 * 60_000, maxBuffer: 64 << 20 });
  cleanupMounts(env.AWC_HOME!, work, env);
  const at = existsSync(stepFile) ? readFileSync(stepFile, 'utf8').trim() : '?';
  assert.equal(
    r.status,
    0,
    `${name}:${at}: the block at this line failed (exit ${r.status ?? r.signal})\n--- stdout\n${r.stdout.slice(-3000)}\n--- stderr\n${r.stderr.slice(-3000)}`,
  );
  assert.equal(at, 'done', 'every step ran');
}

describe('runnable blocks of the tutorials and how-to guides', () => {
  const parsed = pages().map((p) => ({ name: p, page: parseDocPage(readFileSync(join(root, p), 'utf8'), p) }));

  it('marks runnable blocks in the pages (the harness has work)', () => {
    const runnable = parsed.filter((p) => p.page.steps.some((s) => s.kind === 'block'));
    assert.ok(runnable.length >= 3, `pages with runnable blocks: ${runnable.map((p) => p.name).join(', ')}`);
  });

  for (const { name, page } of parsed)
    if (page.steps.length > 0) it(`${name} runs as written${page.fleet ? ' (PostgreSQL + S3)' : ''}`, (t) => runPage(t, name, page));
});

describe('the runnable markers', () => {
  it('a marker not followed by a shell fence, an unknown option or an unclosed setup is an error naming the line', () => {
    assert.throws(() => parseDocPage('a\n<!-- runnable -->\ntext\n', 'x.md'), /x\.md:2: .*followed at once by a sh or bash fence/);
    assert.throws(() => parseDocPage('<!-- runnable -->\n```text\nls\n```\n', 'x.md'), /x\.md:1:/);
    assert.throws(() => parseDocPage('<!-- runnable exit=abc -->\n```sh\nls\n```\n', 'x.md'), /x\.md:1: not a runnable marker/);
    assert.throws(() => parseDocPage('<!-- runnable-setup\nls\n', 'x.md'), /x\.md:1: .*not closed/);
    assert.throws(() => parseDocPage('<!-- runnable-page cloud -->\n', 'x.md'), /unknown page option/);
  });

  it('steps keep page order, an indented fence loses its indent, and exit=N is checked by the script', async (t) => {
    const page = parseDocPage(
      [
        '<!-- runnable-setup',
        'mkdir d',
        '-->',
        '1. step',
        '   <!-- runnable -->',
        '   ```sh',
        '   cd d',
        '   ```',
        '<!-- runnable exit=3 -->',
        '```bash',
        'exit 3',
        '```',
      ].join('\n'),
      'x.md',
    );
    assert.deepEqual(
      page.steps.map((s) => [s.kind, s.line, s.code, s.exit]),
      [
        ['setup', 1, 'mkdir d', 0],
        ['block', 5, 'cd d', 0],
        ['block', 9, 'exit 3', 3],
      ],
    );
    const dir = await tempDirFor(t, 'awc-doc-markers-');
    const run = (p: DocPage) => spawnSync('bash', ['-c', pageScript(p, join(dir, 'step'))], { cwd: dir, encoding: 'utf8' });
    const ok = run(page);
    assert.equal(ok.status, 0, ok.stderr);
    assert.equal(readFileSync(join(dir, 'step'), 'utf8').trim(), 'done');
    const wrong = run({ fleet: false, steps: [{ ...page.steps[2], exit: 4 }] });
    assert.equal(wrong.status, 97);
    assert.match(wrong.stderr, /line 9: exit 3, the page says 4/);
    const failing = run({ fleet: false, steps: [{ kind: 'block', line: 7, code: 'false\necho after', exit: 0 }] });
    assert.equal(failing.status, 1, 'a failing command stops the page');
    assert.equal(readFileSync(join(dir, 'step'), 'utf8').trim(), '7');
  });
});
