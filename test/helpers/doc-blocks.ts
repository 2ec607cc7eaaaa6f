/**
 * The runnable command blocks of a documentation page (docs/tutorials, docs/how-to), as the
 * test that runs them (test/repo/runnable-docs.test.ts) reads them. The markers are HTML
 * comments, so a rendered page shows none of them (test/README.md, "Runnable blocks in the docs"):
 *
 * - `<!-- runnable -->` on the line before a ```` ```sh ```` (or `bash`) fence: the block runs.
 *   `<!-- runnable exit=N -->`: the block must exit with status N (a refusal the page shows).
 * - `<!-- runnable-setup` … `-->`: hidden commands run at that point (e.g. make the repository a
 *   page calls `~/src/app`); `<!-- runnable-check` … `-->` the same, after the blocks it checks.
 * - `<!-- runnable-page fleet -->` anywhere: the page's blocks run with `AWC_CATALOG` and
 *   `AWC_OBJECT_STORE` naming a fresh PostgreSQL database and S3 bucket of the test servers.
 *
 * Every block of a page runs in order in one bash (`set -euo pipefail`), so `cd` and `export`
 * carry over; nothing else does.
 */

/** One step of a page: a shown block or a hidden setup/check, with where it starts in the page. */
export interface DocStep {
  kind: 'block' | 'setup' | 'check';
  /** 1-based line of the marker in the page. */
  line: number;
  /** The commands (the fence's or the comment's body). */
  code: string;
  /** The exit status the step must end with (default 0). */
  exit: number;
}

/** What a page asks of the harness, and its steps in page order. */
export interface DocPage {
  fleet: boolean;
  steps: DocStep[];
}

const FENCE = /^(\s*)(`{3,}|~{3,})\s*(sh|bash|shell)?\b.*$/;

/**
 * Reads the markers of one page. @throws Error naming the line for a marker that is not
 * followed by a shell fence, an unknown option, or an unclosed comment (a typo must never
 * turn a runnable block into an illustrative one silently)
 */
export function parseDocPage(text: string, name: string): DocPage {
  const lines = text.split('\n');
  const page: DocPage = { fleet: false, steps: [] };
  for (let i = 0; i < lines.length; i++) {
    const l = lines[i].trim();
    if (l === '<!-- runnable-page fleet -->') page.fleet = true;
    else if (l.startsWith('<!-- runnable-page')) throw new Error(`${name}:${i + 1}: unknown page option: ${l}`);
    else if (l.startsWith('<!-- runnable-setup') || l.startsWith('<!-- runnable-check')) i = hiddenStep(lines, i, name, page.steps);
    else if (l.startsWith('<!-- runnable')) i = shownStep(lines, i, name, page.steps);
  }
  return page;
}

/** A `<!-- runnable-setup|check` comment from line `i`: its body up to `-->`. @returns the last line it used */
function hiddenStep(lines: string[], i: number, name: string, steps: DocStep[]): number {
  const kind = lines[i].includes('runnable-setup') ? 'setup' : 'check';
  if (lines[i].trim() !== `<!-- runnable-${kind}`)
    throw new Error(`${name}:${i + 1}: the commands of runnable-${kind} start on the next line`);
  const end = lines.findIndex((l, j) => j > i && l.trim() === '-->');
  if (end < 0) throw new Error(`${name}:${i + 1}: runnable-${kind} is not closed by a line \`-->\``);
  steps.push({ kind, line: i + 1, code: lines.slice(i + 1, end).join('\n'), exit: 0 });
  return end;
}

/** A `<!-- runnable … -->` marker on line `i` and the fence after it. @returns the fence's last line */
function shownStep(lines: string[], i: number, name: string, steps: DocStep[]): number {
  const m = /^<!-- runnable(?: exit=(\d+))? -->$/.exec(lines[i].trim());
  if (!m) throw new Error(`${name}:${i + 1}: not a runnable marker (\`<!-- runnable -->\` or \`<!-- runnable exit=N -->\`): ${lines[i]}`);
  const open = FENCE.exec(lines[i + 1] ?? '');
  if (!open || open[3] === undefined) throw new Error(`${name}:${i + 1}: a runnable marker must be followed at once by a sh or bash fence`);
  const close = lines.findIndex((l, j) => j > i + 1 && l.trim() === open[2]);
  if (close < 0) throw new Error(`${name}:${i + 2}: the fence is not closed`);
  const indent = open[1].length;
  const code = lines
    .slice(i + 2, close)
    .map((l) => l.slice(Math.min(indent, l.length - l.trimStart().length)))
    .join('\n');
  steps.push({ kind: 'block', line: i + 1, code, exit: m[1] === undefined ? 0 : Number(m[1]) });
  return close;
}

/**
 * The bash script that runs a page's steps in order: each step records its line in
 * `stepFile` before it runs; a step with an expected exit status runs in a subshell and the
 * script stops with status 97 when the status differs.
 */
export function pageScript(page: DocPage, stepFile: string): string {
  const out = ['set -euo pipefail'];
  for (const s of page.steps) {
    out.push(`echo ${s.line} > '${stepFile}'`);
    if (s.exit === 0) out.push(s.code);
    else
      out.push(
        'set +e',
        `( set -e\n${s.code}\n)`,
        'rc=$?',
        'set -e',
        `[ "$rc" = ${s.exit} ] || { echo "line ${s.line}: exit $rc, the page says ${s.exit}" >&2; exit 97; }`,
      );
  }
  out.push(`echo done > '${stepFile}'`);
  return out.join('\n') + '\n';
}
