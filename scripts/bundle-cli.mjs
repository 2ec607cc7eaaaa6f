#!/usr/bin/env node
// The CLI's bundled build (CLI latency, docs/explanation/cli-latency.md): `npm run build` runs it after tsc.
//
// esbuild bundles src/cli/entry/main.ts into dist/cli/ (ESM, code splitting: every `await import()` of the
// source stays a chunk that loads only when a command needs it; minified, with linked source maps) and
// replaces tsc's dist/src/cli/entry/main.js with a stub that imports the front (dist/cli/front.cjs, which `bin` runs), so the tests, the
// daemon's supervisor and the docs keep one path. Everything else in dist/src stays tsc's output (the
// tests import it; the daemon's supervisor and the FUSE reader workers run it).
//
// Bundled: AWC's own code and the pure-JS packages of BUNDLED (and what they import). Every other package
// stays external (imported from node_modules at run time): native addons, packages that read their own
// files, and the big ones only one command loads (the AWS SDK, pg, MCP's SDK with zod, prom-client).
//
// `import.meta.url` in a bundled source file is rewritten to the URL of that file's tsc output, so
// `new URL('./supervisor-main.js', import.meta.url)` and the like name the same files as unbundled.
//
// dist/cli/manifest.json: which source files and packages each output file holds (test/cli/entry/cli-lazy-load.test.ts
// reads it to tell which packages a command loaded).
import { build } from 'esbuild';
import { createHash } from 'node:crypto';
import { chmodSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const outdir = join(root, 'dist', 'cli');
const stub = join(root, 'dist', 'src', 'cli', 'entry', 'main.js');

/** Pure-JS packages bundled into the CLI (their own dependencies come with them). */
const BUNDLED = new Set(['commander', 'kysely', 'smol-toml']);

/** The package a bare specifier names (`@scope/name/sub` → `@scope/name`). */
const packageOf = (spec) =>
  spec
    .split('/')
    .slice(0, spec.startsWith('@') ? 2 : 1)
    .join('/');
const isBare = (spec) => !spec.startsWith('.') && !spec.startsWith('/') && !spec.startsWith('node:');

/** Bundles BUNDLED and what they import; leaves every other package external. */
const externals = {
  name: 'awc-externals',
  setup(b) {
    b.onResolve({ filter: /.*/ }, (args) => {
      if (!isBare(args.path) || args.kind === 'entry-point') return undefined;
      const fromPackage = args.importer.includes(`${'/'}node_modules${'/'}`);
      if (fromPackage || BUNDLED.has(packageOf(args.path))) return undefined; // bundled
      return { path: args.path, external: true };
    });
  },
};

/** `import.meta.url` of each source file → the URL of its tsc output (dist/src/…/x.js). */
const importMetaUrl = {
  name: 'awc-import-meta-url',
  setup(b) {
    b.onLoad({ filter: /[\\/]src[\\/].*\.ts$/ }, (args) => {
      const text = readFileSync(args.path, 'utf8');
      if (!text.includes('import.meta.url')) return { contents: text, loader: 'ts' };
      const compiled = join(root, 'dist', relative(root, args.path)).replace(/\.ts$/, '.js');
      const rel = relative(outdir, compiled).split('\\').join('/');
      return { contents: text.replaceAll('import.meta.url', `new URL(${JSON.stringify(rel)}, import.meta.url).href`), loader: 'ts' };
    });
  },
};

rmSync(outdir, { recursive: true, force: true });
/** What both builds share: ESM for Node 20, minified, with linked source maps and a metafile. */
const common = {
  absWorkingDir: root,
  outdir,
  bundle: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  minify: true,
  sourcemap: 'linked',
  sourcesContent: false,
  metafile: true,
  logLevel: 'warning',
};
const result = await build({
  ...common,
  // awc: the CLI in process; warm-worker: a warm worker of the host daemon (src/daemon/warm/warm-pool.ts), sharing its chunks
  entryPoints: { awc: 'src/cli/entry/cli-main.ts', 'warm-worker': 'src/cli/entry/warm-worker-main.ts' },
  splitting: true,
  plugins: [externals, importMetaUrl],
  // CommonJS packages in an ESM bundle call require() (node builtins): give every chunk one
  banner: { js: "import { createRequire as __awcRequire } from 'node:module'; const require = __awcRequire(import.meta.url);" },
});

const manifest = {};
/** Adds the output files of one esbuild result to the manifest. */
function addToManifest(res) {
  for (const [file, out] of Object.entries(res.metafile.outputs)) {
    if (!file.endsWith('.js')) continue;
    const packages = new Set();
    const sources = [];
    for (const input of Object.keys(out.inputs)) {
      const m = /(?:^|\/)node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(input);
      if (m) packages.add(m[1]);
      else sources.push(input);
    }
    const imports = out.imports.filter((i) => i.external && isBare(i.path)).map((i) => packageOf(i.path));
    manifest[relative(outdir, join(root, file))] = { packages: [...packages].sort(), external: [...new Set(imports)].sort(), sources };
  }
}
addToManifest(result);
if (process.env.AWC_BUNDLE_METAFILE) writeFileSync(process.env.AWC_BUNDLE_METAFILE, JSON.stringify(result.metafile));

// The front (src/cli/warm/front.ts): the one file every command loads first; node built-ins only, no chunks.
// CommonJS, so that a command served by a warm worker never starts Node's ESM loader in the caller's
// process (measured: about 10 ms of CPU per command, docs/explanation/cli-latency.md); `bin` runs it.
const front = await build({
  ...common,
  format: 'cjs',
  outExtension: { '.js': '.cjs' },
  entryPoints: { front: 'src/cli/entry/front-main.ts' },
  plugins: [importMetaUrl],
  banner: { js: "#!/usr/bin/env node\nconst __awcFrontUrl = require('node:url').pathToFileURL(__filename).href;" },
  define: { 'import.meta.url': '__awcFrontUrl' },
});
const frontImports = Object.values(front.metafile.outputs).flatMap((o) => o.imports.filter((i) => !i.path.startsWith('node:')));
if (frontImports.length > 0) throw new Error(`the front must import node built-ins only: ${frontImports.map((i) => i.path).join(', ')}`);
addToManifest(front);
writeFileSync(join(outdir, 'manifest.json'), JSON.stringify(manifest, null, 1) + '\n');

// build-id: a digest of the bundle's files; a warm worker runs only commands of its own build
const hash = createHash('sha256');
for (const file of Object.keys(result.metafile.outputs).sort())
  if (file.endsWith('.js')) hash.update(file).update(readFileSync(join(root, file)));
writeFileSync(join(outdir, 'build-id'), hash.digest('hex').slice(0, 32) + '\n');

rmSync(`${stub}.map`, { force: true });
writeFileSync(
  stub,
  "#!/usr/bin/env node\n// The CLI is bundled (scripts/bundle-cli.mjs): this stub keeps the path that bin, the tests and the daemon's supervisor run.\nimport '../../../cli/front.cjs';\n",
);
chmodSync(join(outdir, 'front.cjs'), 0o755);
