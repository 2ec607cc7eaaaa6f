import { existsSync, readFileSync } from 'node:fs';
import { SourceMap, type SourceMapPayload } from 'node:module';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** A frame's location: `file:///…/x.js:12:34` or `/…/x.js:12:34` (V8's stack trace format). */
const FRAME = /(file:\/\/\/[^\s()]+?\.js|\/[^\s()]+?\.js):(\d+):(\d+)/g;

const maps = new Map<string, { map: SourceMap; dir: string } | null>();

/** The source map beside a generated file (`<file>.map`, as scripts/bundle-cli.mjs writes them), or null. */
function mapOf(file: string): { map: SourceMap; dir: string } | null {
  let m = maps.get(file);
  if (m === undefined) {
    m = null;
    try {
      if (existsSync(`${file}.map`))
        m = { map: new SourceMap(JSON.parse(readFileSync(`${file}.map`, 'utf8')) as SourceMapPayload), dir: dirname(file) };
    } catch {
      // a missing or damaged map: the frame stays as it is
    }
    maps.set(file, m);
  }
  return m;
}

/**
 * Rewrites the frames of a stack trace that point into the bundled CLI (dist/cli/*.js, minified)
 * to the TypeScript sources they came from (`/…/src/cli/output/output.ts:9:33`), through the source
 * map beside each bundle file. Frames without a map (node internals, node_modules, tsc's
 * output) are left as they are. For the stack an E_INTERNAL report prints: the bundle is read
 * without `--enable-source-maps`, which would parse every map at every start
 * (docs/explanation/cli-latency.md). Lines and columns are 1-based as in V8's traces. Never throws.
 */
export function sourceMappedStack(stack: string): string {
  return stack.replace(FRAME, (whole: string, loc: string, line: string, col: string) => {
    const file = loc.startsWith('file://') ? fileURLToPath(loc) : loc;
    const m = mapOf(file);
    if (!m) return whole;
    const e = m.map.findEntry(Number(line) - 1, Number(col) - 1) as {
      originalSource?: string;
      originalLine?: number;
      originalColumn?: number;
    };
    if (e.originalSource === undefined || e.originalLine === undefined || e.originalColumn === undefined) return whole;
    const src = e.originalSource.startsWith('file://') ? fileURLToPath(e.originalSource) : resolve(m.dir, e.originalSource);
    return `${src}:${e.originalLine + 1}:${e.originalColumn + 1}`;
  });
}
