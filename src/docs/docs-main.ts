// `npm run docs:gen` (after the build): writes the generated parts of docs/ (src/docs/generated.ts)
// and prints the files it changed. With --check it writes nothing and exits 1 naming each file
// that differs from what the code makes.
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildProgram } from '../cli/entry/program.js';
import { commandSpec } from '../cli/output/command-spec.js';
import { DaemonMetrics } from '../daemon/metrics/metrics.js';
import { generatedFiles } from './generated.js';

const root = fileURLToPath(new URL('../../../', import.meta.url));
const check = process.argv.includes('--check');
const files = generatedFiles(root, { cli: commandSpec(buildProgram().program), metrics: new DaemonMetrics().registry });
const stale = files.filter((f) => !existsSync(join(root, f.path)) || readFileSync(join(root, f.path), 'utf8') !== f.text);
for (const f of stale) {
  if (!check) {
    mkdirSync(dirname(join(root, f.path)), { recursive: true });
    writeFileSync(join(root, f.path), f.text);
  }
  process.stdout.write(`${check ? 'stale: ' : 'wrote '}${f.path}\n`);
}
if (check && stale.length > 0) {
  process.stderr.write('docs: generated parts differ from the code; run `npm run docs:gen` and commit the result\n');
  process.exitCode = 1;
}
