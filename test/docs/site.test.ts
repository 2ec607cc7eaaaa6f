import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { extname, join, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type Page } from 'playwright-core';
import { makeTempDir, removeTempDir } from '../helpers/temp-dir.js';

/**
 * The documentation site (issue 29): VitePress builds docs/ (docs/.vitepress/config.mts) once for
 * this file, every internal link of the built pages resolves (file and anchor), and Debian's
 * Chromium, driven by playwright-core, opens every page over HTTP, checks that it shows its
 * title as its h1 with no console error, and saves screenshots of the home page, a tutorial and
 * the benchmark plots into test-artifacts/docs/.
 */

const root = fileURLToPath(new URL('../../..', import.meta.url));
const CHROMIUM = '/usr/bin/chromium';
const ARTIFACTS = join(root, 'test-artifacts', 'docs');
/** Tabs open at once (CI has 2 cores; a large page hydrates for a few seconds). */
const TABS = 3;

let out = '';
let server: Server | undefined;
let base = '';
let browser: Browser | undefined;

/** The Markdown pages of docs/ (relative to it), as the site has them. */
function sourcePages(dir = ''): string[] {
  return readdirSync(join(root, 'docs', dir), { withFileTypes: true }).flatMap((e) => {
    const rel = dir === '' ? e.name : `${dir}/${e.name}`;
    if (e.isDirectory()) return e.name.startsWith('.') ? [] : sourcePages(rel);
    return e.name.endsWith('.md') ? [rel] : [];
  });
}

/** Every file under `dir`, relative to it. */
function filesUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' }).filter((f) => statSync(join(dir, f)).isFile());
}

/** A static server for the built site on a free loopback port. */
async function serve(dir: string): Promise<Server> {
  const types: Record<string, string> = {
    '.html': 'text/html',
    '.js': 'text/javascript',
    '.css': 'text/css',
    '.svg': 'image/svg+xml',
    '.json': 'application/json',
    '.woff2': 'font/woff2',
  };
  const s = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url ?? '/', 'http://x').pathname);
    let file = resolve(dir, `.${path}`);
    if (file !== dir && !file.startsWith(dir + sep)) return void res.writeHead(403).end();
    if (existsSync(file) && statSync(file).isDirectory()) file = join(file, 'index.html');
    if (!existsSync(file)) return void res.writeHead(404).end('not found');
    res.writeHead(200, { 'content-type': types[extname(file)] ?? 'application/octet-stream' }).end(readFileSync(file));
  });
  await new Promise<void>((ok) => s.listen(0, '127.0.0.1', ok));
  return s;
}

before(async () => {
  out = await makeTempDir('awc-site-');
  const r = spawnSync(join(root, 'node_modules', '.bin', 'vitepress'), ['build', 'docs', '--outDir', out], {
    cwd: root,
    encoding: 'utf8',
    timeout: 5 * 60_000,
  });
  assert.equal(r.status, 0, `vitepress build failed:\n${r.stdout}\n${r.stderr}`);
  server = await serve(out);
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

after(async () => {
  await browser?.close();
  await new Promise((ok) => (server ? server.close(ok) : ok(undefined)));
  if (out) await removeTempDir(out);
});

/** The built HTML file of a Markdown page (`how-to/x.md` → `how-to/x.html`). */
function htmlOf(page: string): string {
  return page.replace(/\.md$/, '.html');
}

test('the site builds: a page for every Markdown file of docs/, the plots and a search index', () => {
  const built = new Set(filesUnder(out));
  const missing = sourcePages().filter((p) => !built.has(htmlOf(p)));
  assert.deepEqual(missing, []);
  assert.ok(sourcePages().length >= 60, `only ${sourcePages().length} pages`);
  for (const p of [
    'index.html',
    'tutorials/first-workspace.html',
    'explanation/what-awc-is-not.html',
    'reference/metrics.html',
    'benchmark-plots.html',
  ])
    assert.ok(built.has(p), p);
  // the plots: inlined as data URIs while they are small, else assets
  const plots =
    readFileSync(join(out, 'benchmark-plots.html'), 'utf8').match(/<img src="(data:image\/svg\+xml|\/assets\/results-tree-)/g) ?? [];
  assert.equal(plots.length, 2, 'the plots of trees (a) and (b)');
  assert.ok(
    [...built].some((f) => /localSearchIndex/.test(f)),
    'local search has its index',
  );
});

/** The ids a built HTML page defines (the anchors a link may name). */
function idsOf(html: string): Set<string> {
  return new Set([...html.matchAll(/\sid="([^"]+)"/g)].map((m) => m[1]));
}

/** What is wrong with the internal links of one built page (`file`, relative to the site). */
function brokenLinks(file: string, html: string, ids: (f: string) => Set<string> | undefined): string[] {
  const problems: string[] = [];
  for (const m of html.matchAll(/<a\s[^>]*?href="([^"]*)"/g)) {
    const href = m[1].replace(/&amp;/g, '&');
    if (href === '' || /^[a-z][a-z0-9+.-]*:/i.test(href) || href.startsWith('//')) continue;
    const url = new URL(href, `http://site/${file}`);
    let target = decodeURIComponent(url.pathname).replace(/^\//, '');
    if (target === '' || target.endsWith('/')) target += 'index.html';
    const anchors = ids(target);
    if (anchors === undefined) problems.push(`${file}: ${href}: no such page`);
    else if (url.hash && !anchors.has(decodeURIComponent(url.hash.slice(1))))
      problems.push(`${file}: ${href}: no #${decodeURIComponent(url.hash.slice(1))} there`);
  }
  return problems;
}

test('every internal link of the site resolves, to its page and its anchor', () => {
  const pages = filesUnder(out).filter((f) => f.endsWith('.html'));
  const cache = new Map<string, Set<string>>();
  const ids = (f: string): Set<string> | undefined => {
    if (!existsSync(join(out, f)) || !statSync(join(out, f)).isFile()) return undefined;
    if (!f.endsWith('.html')) return new Set();
    if (!cache.has(f)) cache.set(f, idsOf(readFileSync(join(out, f), 'utf8')));
    return cache.get(f);
  };
  let links = 0;
  const problems = pages.flatMap((f) => {
    const html = readFileSync(join(out, f), 'utf8');
    links += [...html.matchAll(/<a\s/g)].length;
    return brokenLinks(f, html, ids);
  });
  assert.deepEqual(problems, []);
  assert.ok(links > 1000, `only ${links} links`);
  // and the check can fail: a missing page, a missing anchor
  assert.deepEqual(brokenLinks('x.html', '<a href="./nowhere.html">a</a><a class="y" href="/reference/cli.html#no-such">b</a>', ids), [
    'x.html: ./nowhere.html: no such page',
    'x.html: /reference/cli.html#no-such: no #no-such there',
  ]);
});

/** The h1 a page must show: its first `# ` heading without code marks (on the home page, the hero's name and text). */
function expectedTitle(page: string): string {
  const md = readFileSync(join(root, 'docs', page), 'utf8');
  if (page === 'index.md') return `${/^ {2}name: (.+)$/m.exec(md)?.[1]}${/^ {2}text: (.+)$/m.exec(md)?.[1]}`; // the hero's name and text
  const m = /^# (.+)$/m.exec(md);
  assert.ok(m, `${page} has no # heading`);
  return m[1].replace(/`/g, '');
}

/** Opens one page; returns what is wrong with it (not found, no h1 or not `want`, console errors). */
async function checkPage(tab: Page, page: string, want = expectedTitle(page)): Promise<string[]> {
  const errors: string[] = [];
  const onConsole = (msg: { type(): string; text(): string }): void => {
    if (msg.type() === 'error') errors.push(`console: ${msg.text()}`);
  };
  const onError = (err: Error): void => void errors.push(`page error: ${err.message}`);
  tab.on('console', onConsole);
  tab.on('pageerror', onError);
  try {
    const res = await tab.goto(`${base}/${htmlOf(page)}`, { waitUntil: 'load' });
    if (res?.status() !== 200) errors.push(`status ${res?.status()}`);
    const h1 =
      (await tab.locator('h1').first().textContent({ timeout: 30_000 }))
        ?.replace(/\u200b/g, '')
        .replace(/\s+/g, ' ')
        .trim() ?? '';
    if (h1 !== want) errors.push(`h1 is "${h1}", not "${want}"`);
  } catch (err) {
    errors.push(`failed: ${(err as Error).message}`);
  } finally {
    tab.off('console', onConsole);
    tab.off('pageerror', onError);
  }
  return errors.map((e) => `${page}: ${e}`);
}

test('Chromium opens every page: each shows its title, none logs an error; screenshots of three', { timeout: 5 * 60_000 }, async () => {
  assert.ok(existsSync(CHROMIUM), `${CHROMIUM} is missing: apt-get install chromium (.ci/run does)`);
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'], headless: true });
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const queue = sourcePages();
  const problems: string[] = [];
  let opened = 0;
  await Promise.all(
    Array.from({ length: TABS }, async () => {
      const tab = await context.newPage();
      for (let page = queue.shift(); page !== undefined; page = queue.shift()) {
        problems.push(...(await checkPage(tab, page)));
        opened++;
      }
      await tab.close();
    }),
  );
  assert.deepEqual(problems, []);
  assert.equal(opened, sourcePages().length);
  mkdirSync(ARTIFACTS, { recursive: true });
  const tab = await context.newPage();
  for (const [page, name] of [
    ['index.md', 'home.png'],
    ['tutorials/first-workspace.md', 'tutorial-first-workspace.png'],
    ['benchmark-plots.md', 'benchmark-plots.png'],
  ]) {
    await tab.goto(`${base}/${htmlOf(page)}`, { waitUntil: 'load' });
    if (page === 'benchmark-plots.md') await tab.waitForFunction('[...document.images].every((i) => i.complete && i.naturalWidth > 0)');
    await tab.screenshot({ path: join(ARTIFACTS, name), fullPage: page !== 'tutorials/first-workspace.md' });
    assert.ok(statSync(join(ARTIFACTS, name)).size > 10_000, `${name} is too small to show the page`);
  }
  // and the check can fail: a page whose h1 is not the title asked for, a page that is not there
  assert.deepEqual(await checkPage(tab, 'reference/errors.md', 'Not its title'), [
    'reference/errors.md: h1 is "Errors and exit codes", not "Not its title"',
  ]);
  const gone = await checkPage(tab, 'no-such-page.md', 'x');
  assert.ok(
    gone.some((p) => p.includes('status 404')),
    gone.join('\n'),
  );
});
