/**
 * Plots of the benchmark figures (issue 29), made from docs/benchmarks.md's "Results" table as
 * `npm run bench` wrote it: for each tree, one horizontal bar per figure with a ratio in its
 * "AWC vs baseline" column, on a logarithmic axis around 1× (AWC equal to its baseline), coloured
 * by the table's "met?" column. The plot draws what the table says and nothing else: the first
 * ratio of each row with the words the table puts after it (`0.50× native`), the row's own
 * figures in the table below the plot.
 */

/** One row of the Results table. */
export interface ResultRow {
  figure: string;
  /** `(a)`, `(b)` or `(c)`. */
  tree: string;
  awc: string;
  baseline: string;
  /** The "AWC vs baseline" cell as written (`2.4e-3× cp -a; 3.3e-4× worktree`). */
  versus: string;
  target: string;
  /** `met`, `not met` or `—`. */
  met: string;
}

/** A row with the ratio the plot draws: the first `N×` of its "AWC vs baseline" cell, and the words after it. */
export interface PlottedRow extends ResultRow {
  ratio: number;
  /** `0.50× native`: the part of the cell the bar stands for. */
  label: string;
}

/** The cells of one Markdown table row (`|` inside inline code or escaped as `\|` stays in its cell). */
function cells(line: string): string[] {
  const out: string[] = [];
  let cur = '';
  let code = false;
  const body = line.trim().replace(/^\|/, '').replace(/\|$/, '');
  for (let i = 0; i < body.length; i++) {
    const ch = body[i];
    if (ch === '`') code = !code;
    if (ch === '\\' && body[i + 1] === '|') {
      cur += '|';
      i++;
    } else if (ch === '|' && !code) {
      out.push(cur.trim());
      cur = '';
    } else cur += ch;
  }
  out.push(cur.trim());
  return out;
}

/**
 * The rows of the "## Results" table of a benchmarks page. @throws Error when the page has no
 * such table or its columns are not the seven `npm run bench` writes (the plot would mislabel)
 */
export function resultsTable(md: string): ResultRow[] {
  const section = /^## Results\n([\s\S]*?)(?=^## )/m.exec(md);
  if (!section) throw new Error('docs/benchmarks.md has no "## Results" section');
  const lines = section[1].split('\n').filter((l) => l.startsWith('|'));
  const head = cells(lines[0] ?? '');
  const want = ['figure', 'tree', 'AWC', 'baseline (same run)', 'AWC vs baseline', 'target', 'met?'];
  if (head.join('|') !== want.join('|')) throw new Error(`the Results table's columns are ${head.join(', ')}, not ${want.join(', ')}`);
  return lines.slice(2).map((l) => {
    const [figure, tree, awc, baseline, versus, target, met] = cells(l);
    return { figure, tree, awc, baseline, versus, target, met: met.replace(/\*/g, '') };
  });
}

/** The row with its first ratio, or undefined when its "AWC vs baseline" cell has none (`—`). */
export function plotted(row: ResultRow): PlottedRow | undefined {
  const m = /(\d+(?:\.\d+)?(?:e-?\d+)?)×\s*([^;]*)/.exec(row.versus);
  if (!m) return undefined;
  return { ...row, ratio: Number(m[1]), label: `${m[1]}× ${m[2].trim()}`.trim() };
}

/** `s` escaped for SVG text. */
function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/`/g, '');
}

/** Bar colours by the "met?" cell. */
const COLOURS: Record<string, string> = { met: '#2e7d32', 'not met': '#c62828' };
const NEUTRAL = '#607d8b';

/** The layout of a plot, in SVG user units (pixels). */
const W = 960;
const LABEL_W = 430;
const ROW_H = 26;
const TOP = 64;
const RIGHT_PAD = 130;

/** The log10 range of the axis: whole decades around every ratio and 1×. */
function decades(rows: PlottedRow[]): [number, number] {
  const logs = rows.map((r) => Math.log10(r.ratio));
  return [Math.floor(Math.min(0, ...logs)), Math.ceil(Math.max(0, ...logs)) || 1];
}

/**
 * An SVG plot of `rows` (one tree's plotted rows): `title` on top, `source` (where the figures
 * come from) at the bottom. Self-contained, white background, no script.
 */
export function ratioPlot(rows: PlottedRow[], title: string, source: string): string {
  const [lo, hi] = decades(rows);
  const plotW = W - LABEL_W - RIGHT_PAD;
  const x = (ratio: number): number => LABEL_W + ((Math.log10(ratio) - lo) / (hi - lo)) * plotW;
  const height = TOP + rows.length * ROW_H + 56;
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${height}" viewBox="0 0 ${W} ${height}" font-family="sans-serif" font-size="12">`,
    `<title>${esc(title)}</title>`,
    `<rect width="${W}" height="${height}" fill="#ffffff"/>`,
    `<text x="12" y="22" font-size="15" font-weight="bold">${esc(title)}</text>`,
    `<text x="12" y="42" fill="#444">AWC's figure divided by its baseline's, as the table gives it; log scale; the line at 1× is AWC equal to the baseline</text>`,
  ];
  for (let d = lo; d <= hi; d++) {
    const gx = x(10 ** d).toFixed(1);
    out.push(
      `<line x1="${gx}" y1="${TOP - 6}" x2="${gx}" y2="${TOP + rows.length * ROW_H}" stroke="${d === 0 ? '#000' : '#ddd'}"${d === 0 ? ' stroke-dasharray="4 3"' : ''}/>`,
    );
    out.push(`<text x="${gx}" y="${TOP + rows.length * ROW_H + 16}" text-anchor="middle" fill="#444">${d === 0 ? '1×' : `1e${d}×`}</text>`);
  }
  rows.forEach((r, i) => {
    const y = TOP + i * ROW_H;
    const [a, b] = [x(1), x(r.ratio)].sort((p, q) => p - q);
    const fig = r.figure.length > 68 ? `${r.figure.slice(0, 66)}…` : r.figure;
    out.push(`<text x="${LABEL_W - 8}" y="${y + 16}" text-anchor="end">${esc(fig)}</text>`);
    out.push(
      `<rect x="${a.toFixed(1)}" y="${y + 5}" width="${Math.max(1, b - a).toFixed(1)}" height="${ROW_H - 10}" fill="${COLOURS[r.met] ?? NEUTRAL}"/>`,
    );
    out.push(
      `<text x="${(Math.max(a, b) + 6).toFixed(1)}" y="${y + 16}">${esc(`${r.label} (${r.met === '—' ? 'no target' : r.met})`)}</text>`,
    );
  });
  out.push(`<text x="12" y="${height - 12}" fill="#444">Source: ${esc(source)}</text>`, '</svg>');
  return out.join('\n') + '\n';
}

/** What the plots page shows of one tree: the file name of its plot and the rows drawn or left out. */
export interface TreePlot {
  tree: string;
  file: string;
  svg: string;
  drawn: PlottedRow[];
  /** Rows with no ratio in the table (`—`), named under the plot. */
  skipped: ResultRow[];
}

/** One plot per tree of the Results table of `md` (docs/benchmarks.md); `run` names the run (its first paragraph's date). */
export function benchPlots(md: string): TreePlot[] {
  const rows = resultsTable(md);
  const run = /on (\d{4}-\d{2}-\d{2})/.exec(md)?.[1] ?? 'the last run';
  const trees = [...new Set(rows.map((r) => r.tree))];
  return trees.map((tree) => {
    const mine = rows.filter((r) => r.tree === tree);
    const drawn = mine.map(plotted).filter((r): r is PlottedRow => r !== undefined);
    const letter = tree.replace(/[()]/g, '');
    const source = `docs/benchmarks.md, "Results", tree ${tree}, npm run bench of ${run}`;
    return {
      tree,
      file: `results-tree-${letter}.svg`,
      svg: ratioPlot(drawn, `Tree ${tree}: AWC against its baseline (${run})`, source),
      drawn,
      skipped: mine.filter((r) => plotted(r) === undefined),
    };
  });
}
