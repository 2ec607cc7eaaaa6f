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

/**
 * `fresh` (a newly rendered docs/benchmarks.md) with every marked section of `old` that
 * `fresh` lacks appended (`<!-- name:begin … -->` … `<!-- name:end -->`, as replaceDocSection
 * writes them): a full `npm run bench` re-renders the page, and must not drop what a
 * standalone bench (bench:claude, …) wrote there.
 */
export function keepDocSections(old: string, fresh: string): string {
  const kept: string[] = [];
  for (const m of old.matchAll(/<!-- ([a-z0-9-]+):begin[^>]*-->[\s\S]*?<!-- \1:end -->/g)) {
    if (!fresh.includes(`<!-- ${m[1]}:begin`)) kept.push(m[0]);
  }
  return kept.length === 0 ? fresh : `${fresh.trimEnd()}\n\n${kept.join('\n\n')}\n`;
}

/** Prints a standalone bench's section to stdout and, when `write`, keeps it (see replaceDocSection). */
export function emitDocSection(text: string, write: boolean, keep: string, begin: string, end: string): void {
  process.stdout.write(text + '\n');
  if (write) replaceDocSection(keep, begin, end, text);
}
