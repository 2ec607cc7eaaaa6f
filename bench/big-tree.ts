import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { treeStats } from './util.js';

/**
 * Tree (b): a large real tree made of real npm packages, built once under the bench cache
 * directory and reused across runs (`<cache>/big-tree`). Big, mostly pure-JS packages whose
 * installs download nothing beyond the registry tarballs; `npm install --ignore-scripts` so no
 * install script runs at all. The tree is a git repository with package.json, the lockfile and
 * a .gitignore and an .npmrc (legacy-peer-deps) committed (node_modules ignored), so `git worktree add` + `npm ci --offline`
 * reproduces it from the local npm cache (the worktree baseline).
 */

/** First round of packages (a few hundred MiB each round; more rounds until big enough). */
export const BIG_TREE_PACKAGES: string[][] = [
  [
    'typescript',
    'aws-sdk@2',
    'next',
    'react',
    'react-dom',
    'monaco-editor',
    '@mui/material',
    '@mui/icons-material',
    '@emotion/react',
    '@emotion/styled',
    'googleapis',
    'antd',
    'three',
    'pdfjs-dist',
    'firebase',
    'rxjs',
    'lodash',
    'webpack',
    'eslint',
    '@babel/core',
  ],
  [
    '@angular/core',
    '@angular/common',
    '@angular/compiler',
    'echarts',
    'mathjax-full',
    '@fortawesome/free-solid-svg-icons',
    '@tabler/icons',
    'plotly.js-dist',
    '@tensorflow/tfjs',
    'core-js',
    'moment',
    'date-fns',
    'prettier',
    'sass',
    'less',
    'rollup',
    'vite',
  ],
  [
    '@aws-sdk/client-s3',
    '@aws-sdk/client-ec2',
    '@aws-sdk/client-iam',
    '@azure/arm-compute',
    '@azure/arm-network',
    'office-ui-fabric-react',
    '@fluentui/react',
    'ag-grid-community',
    'ckeditor5',
    'cesium',
    'xlsx',
    'highcharts',
    'mapbox-gl',
    'ol',
  ],
];

/** The packages' install, git repo and marker; returns the tree's path and size. Idempotent. */
export async function ensureBigTree(opts: {
  cacheDir: string;
  minBytes: number;
  log: (s: string) => void;
}): Promise<{ dir: string; files: number; bytes: number; packages: string[]; built: boolean }> {
  const dir = join(opts.cacheDir, 'big-tree');
  const marker = join(opts.cacheDir, 'big-tree.ready.json');
  if (existsSync(marker)) {
    const m = JSON.parse(readFileSync(marker, 'utf8')) as { files: number; bytes: number; packages: string[] };
    if (!existsSync(join(dir, '.npmrc'))) {
      // trees built before the .npmrc was added: commit it so `npm ci` in a worktree agrees with the lockfile
      writeFileSync(join(dir, '.npmrc'), NPMRC);
      await sh('git', ['add', '.npmrc'], dir);
      await sh(
        'git',
        ['-c', 'user.name=awc-bench', '-c', 'user.email=bench@awc.invalid', 'commit', '-q', '-m', 'npm: legacy-peer-deps'],
        dir,
      );
    }
    if (m.bytes >= opts.minBytes) return { dir, ...m, built: false };
    opts.log(`big tree at ${dir} has ${m.bytes} bytes, fewer than ${opts.minBytes}: adding packages`);
  }
  mkdirSync(dir, { recursive: true });
  if (!existsSync(join(dir, 'package.json'))) {
    writeFileSync(
      join(dir, 'package.json'),
      JSON.stringify(
        {
          name: 'awc-bench-big-tree',
          version: '1.0.0',
          private: true,
          description: 'AWC benchmark tree (b): real npm packages',
          dependencies: {},
        },
        null,
        2,
      ) + '\n',
    );
    writeFileSync(join(dir, '.gitignore'), 'node_modules/\n');
  }
  // peer-dependency conflicts between unrelated packages are expected here; install and ci must agree on them
  writeFileSync(join(dir, '.npmrc'), NPMRC);
  let st = treeStats(dir);
  for (const round of BIG_TREE_PACKAGES) {
    if (st.bytes >= opts.minBytes) break;
    opts.log(
      `npm install --ignore-scripts ${round.join(' ')}  (tree now ${(st.bytes / 2 ** 20).toFixed(0)} MiB, want ≥ ${(opts.minBytes / 2 ** 20).toFixed(0)} MiB)`,
    );
    await sh('npm', ['install', '--ignore-scripts', '--no-audit', '--no-fund', '--loglevel=error', ...round], dir);
    st = treeStats(dir);
  }
  if (st.bytes < opts.minBytes)
    throw new Error(`big tree reached only ${st.bytes} bytes (< ${opts.minBytes}); add packages to BIG_TREE_PACKAGES`);
  if (!existsSync(join(dir, '.git'))) await sh('git', ['init', '-q'], dir);
  await sh('git', ['add', 'package.json', 'package-lock.json', '.gitignore', '.npmrc'], dir);
  await sh(
    'git',
    [
      '-c',
      'user.name=awc-bench',
      '-c',
      'user.email=bench@awc.invalid',
      'commit',
      '-q',
      '--allow-empty',
      '-m',
      'big tree: package.json and lockfile',
    ],
    dir,
  );
  st = treeStats(dir); // the .git directory now counts too
  const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { dependencies: Record<string, string> };
  const m = { files: st.files, bytes: st.bytes, packages: Object.keys(pkg.dependencies) };
  writeFileSync(`${marker}.tmp`, JSON.stringify(m));
  renameSync(`${marker}.tmp`, marker);
  return { dir, ...m, built: true };
}

const NPMRC = 'legacy-peer-deps=true\n';

function sh(cmd: string, args: string[], cwd: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd, stdio: ['ignore', 'inherit', 'inherit'] });
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`${cmd} ${args.join(' ')} exited ${code}`))));
  });
}
