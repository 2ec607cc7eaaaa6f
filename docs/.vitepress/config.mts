// The documentation site (issue 29): VitePress builds docs/ as it is, with a sidebar of the four
// kinds (tutorials, how-to guides, reference, explanation) made from the folders and each page's
// first heading. `npm run docs` builds it into dist/site, `npm run docs:serve` serves that.
// Headings get GitHub's anchors (so a link that works on GitHub works here), and links to files of
// the repository that are not pages (src/…, test/…, a JSON file) become plain text: the site holds only docs/' pages.
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defineConfig, type DefaultTheme, type MarkdownRenderer as MarkdownIt } from 'vitepress';

const docs = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/** The four kinds, in the order a reader meets them: folder and title. */
const KINDS = [
  { dir: 'tutorials', text: 'Tutorials', first: ['first-workspace.md', 'economics.md'] },
  { dir: 'how-to', text: 'How-to guides', first: [] },
  { dir: 'reference', text: 'Reference', first: ['cli.md', 'configuration.md', 'errors.md', 'metrics.md'] },
  { dir: 'explanation', text: 'Explanation', first: ['design.md', 'what-awc-is-not.md', 'architecture.md'] },
] as const;

/** The text of a page's first `# ` heading, without its inline code marks (the file name when it has none). */
function titleOf(file: string): string {
  const m = /^# (.+)$/m.exec(readFileSync(join(docs, file), 'utf8'));
  return m ? m[1].replace(/`/g, '') : file;
}

/** The sidebar items of one kind: the pages it names first, then the others by title. */
function kindItems(kind: (typeof KINDS)[number]): DefaultTheme.SidebarItem[] {
  const files = readdirSync(join(docs, kind.dir)).filter((f) => f.endsWith('.md'));
  const first: readonly string[] = kind.first;
  const rest = files
    .filter((f) => !first.includes(f))
    .sort((a, b) => titleOf(`${kind.dir}/${a}`).localeCompare(titleOf(`${kind.dir}/${b}`)));
  return [...first.filter((f) => files.includes(f)), ...rest].map((f) => ({
    text: titleOf(`${kind.dir}/${f}`),
    link: `/${kind.dir}/${f.replace(/\.md$/, '')}`,
  }));
}

/**
 * GitHub's anchor of a heading (the same rule as test/repo/docs-links.test.ts): lower case,
 * punctuation and symbols dropped, each space a hyphen. VitePress passes the heading's text
 * with inline code and emphasis already rendered away.
 */
function githubSlug(text: string): string {
  return text
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\s_-]/gu, '')
    .replace(/ /g, '-');
}

/**
 * Whether `href`, a link of the page `page` (relative to docs/), names a file of the repository
 * that is not a page of the site: one outside docs/, or one in it that is not Markdown (the
 * Grafana dashboard's JSON).
 */
function notAPage(page: string, href: string): boolean {
  if (/^[a-z][a-z0-9+.-]*:/i.test(href) || href.startsWith('#') || href.startsWith('/')) return false;
  const path = href.split('#')[0];
  const rel = relative(docs, resolve(docs, dirname(page), path));
  return rel === '..' || rel.startsWith(`..${sep}`) || /\.(?!md$|html$)[a-z0-9]+$/i.test(path);
}

/** HTML the pages really mean: an entity (the headings' anchors), comments (the runnable markers), a few tags. */
const REAL_HTML = /^(&[#\w]+;$|<!--|<\/?(a|b|br|code|details|div|em|i|img|kbd|p|pre|span|strong|sub|summary|sup)(\s|\/?>))/i;

/**
 * Renders `<home>`, `<workspace>` and the like, which the pages write as placeholders, as the
 * text they are rather than as HTML elements (which would also stop Vue compiling the page).
 */
function placeholdersAsText(md: MarkdownIt): void {
  const inline = md.renderer.rules.html_inline;
  const block = md.renderer.rules.html_block;
  md.renderer.rules.html_inline = (tokens, i, options, env, self) =>
    REAL_HTML.test(tokens[i].content)
      ? (inline?.(tokens, i, options, env, self) ?? tokens[i].content)
      : md.utils.escapeHtml(tokens[i].content);
  md.renderer.rules.html_block = (tokens, i, options, env, self) =>
    REAL_HTML.test(tokens[i].content)
      ? (block?.(tokens, i, options, env, self) ?? tokens[i].content)
      : `<p>${md.utils.escapeHtml(tokens[i].content)}</p>`;
}

export default defineConfig({
  title: 'AWC',
  description: 'Agent Workspace Cache: snapshot, fork, mount, checkpoint, diff and export workspaces for coding-agent fleets',
  outDir: '../dist/site',
  cacheDir: '../dist/.vitepress-cache',
  cleanUrls: false,
  head: [['link', { rel: 'icon', type: 'image/svg+xml', href: '/favicon.svg' }]],
  lastUpdated: false,
  // the bundle of the search index and the theme is about 600 kB; that is expected
  vite: { build: { chunkSizeWarningLimit: 2000 }, logLevel: 'warn' },
  markdown: {
    anchor: { slugify: githubSlug },
    config(md) {
      placeholdersAsText(md);
      // A link to a file of the repository outside docs/: its path as code, no link (the site has no such page).
      const open = md.renderer.rules.link_open;
      const close = md.renderer.rules.link_close;
      md.renderer.rules.link_open = (tokens, i, options, env, self) => {
        const href = tokens[i].attrGet('href') ?? '';
        if (notAPage(env.relativePath ?? '', href)) {
          const end = tokens.findIndex((t, j) => j > i && t.type === 'link_close' && t.level === tokens[i].level);
          if (end > 0) tokens[end].meta = { ...tokens[end].meta, outside: true };
          return `<span class="repo-path" title="${md.utils.escapeHtml(relative(docs, resolve(docs, dirname(env.relativePath ?? ''), href)))} in the repository">`;
        }
        return open ? open(tokens, i, options, env, self) : self.renderToken(tokens, i, options);
      };
      md.renderer.rules.link_close = (tokens, i, options, env, self) => {
        if (tokens[i].meta?.outside) return '</span>';
        return close ? close(tokens, i, options, env, self) : self.renderToken(tokens, i, options);
      };
    },
  },
  themeConfig: {
    nav: [
      ...KINDS.map((k) => ({ text: k.text, link: kindItems(k)[0].link })),
      { text: 'Benchmarks', link: '/benchmark-plots' },
      { text: 'Decisions', link: '/decisions' },
    ],
    sidebar: [
      ...KINDS.map((k) => ({ text: k.text, collapsed: false, items: kindItems(k) })),
      {
        text: 'Figures and reasons',
        items: [
          { text: 'Benchmark plots', link: '/benchmark-plots' },
          { text: 'Benchmarks', link: '/benchmarks' },
          { text: 'Decisions and deviations', link: '/decisions' },
        ],
      },
    ],
    search: { provider: 'local' },
    outline: { level: [2, 3] },
  },
});
