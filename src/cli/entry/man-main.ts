// `npm run man` (after the build): writes the man pages of the CLI (src/cli/output/man-pages.ts) into
// dist/man/man1/ (emptied first), or into the directory given as the first argument (its other files left alone).
// Prints the files it wrote.
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { commandSpec } from '../output/command-spec.js';
import { manPages } from '../output/man-pages.js';
import { packageVersion } from '../output/package-version.js';
import { buildProgram } from './program.js';

const given = process.argv[2];
const dir = resolve(given ?? fileURLToPath(new URL('../../../man/man1/', import.meta.url)));
if (given === undefined) rmSync(dir, { recursive: true, force: true });
mkdirSync(dir, { recursive: true });
for (const page of manPages(commandSpec(buildProgram().program), packageVersion())) {
  writeFileSync(join(dir, page.file), page.text);
  process.stdout.write(`${join(dir, page.file)}\n`);
}
