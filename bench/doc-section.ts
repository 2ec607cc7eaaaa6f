import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PROJECT } from './common.js';

/**
 * Writes `text` to bench/`keep` (so a full `npm run bench`, which rewrites
 * docs/benchmarks.md, keeps it: report.ts appends it) and puts it in place in
 * docs/benchmarks.md between the markers `begin` and `end` (appended when they are absent).
 */
export function replaceDocSection(keep: string, begin: string, end: string, text: string): void {
  writeFileSync(join(PROJECT, 'bench', keep), text + '\n');
  const doc = join(PROJECT, 'docs', 'benchmarks.md');
  const old = readFileSync(doc, 'utf8');
  const section = `${begin}\n${text}\n${end}`;
  const i = old.indexOf(begin);
  const j = old.indexOf(end);
  writeFileSync(doc, i >= 0 && j > i ? old.slice(0, i) + section + old.slice(j + end.length) : old.trimEnd() + '\n\n' + section + '\n');
}
