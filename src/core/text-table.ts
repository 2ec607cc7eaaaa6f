/**
 * An aligned text table for people (`awc ls`, `awc usage`): a header row, then the rows, each
 * column as wide as its widest cell, two spaces between columns, trailing spaces trimmed.
 * `right[i]` right-aligns column i (numbers). Widths count UTF-16 code units, so a cell with
 * wide characters may misalign; cells are never cut.
 */
export function textTable(head: string[], rows: string[][], right: boolean[] = []): string {
  const all = [head, ...rows];
  const widths = head.map((_, i) => Math.max(...all.map((r) => (r[i] ?? '').length)));
  return all
    .map((r) =>
      head
        .map((_, i) => (right[i] ? (r[i] ?? '').padStart(widths[i]) : (r[i] ?? '').padEnd(widths[i])))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}
