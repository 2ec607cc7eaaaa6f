#!/usr/bin/env node
// Installs what AWC needs on a fresh machine: system packages (when root and missing) and npm dependencies.
// Idempotent and quiet when everything is present.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const has = (cmd) => spawnSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' }).status === 0;

// System tools AWC shells out to: util-linux mount/umount, coreutils mknod, git (tests, export --git), python3/make/g++ (native addons),
// mkfs.erofs (layer images, docs/explanation/layer-images.md), pkill (the tests stop a test user's processes).
const wanted = [
  ['mount', 'mount'],
  ['git', 'git'],
  ['make', 'make'],
  ['g++', 'g++'],
  ['python3', 'python3'],
  ['setfattr', 'attr'],
  ['mkfs.erofs', 'erofs-utils'],
  ['pkill', 'procps'],
];
const missing = wanted.filter(([cmd]) => !has(cmd)).map(([, pkg]) => pkg);
if (missing.length > 0) {
  if (process.getuid && process.getuid() === 0 && has('apt-get')) {
    console.error(`awc setup: installing ${missing.join(' ')} with apt-get`);
    execFileSync('apt-get', ['update', '-qq'], { stdio: 'inherit' });
    execFileSync('apt-get', ['install', '-y', '-qq', ...missing], {
      stdio: 'inherit',
      env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
    });
  } else {
    console.error(`awc setup: missing system tools: ${missing.join(' ')} (install them, or run as root to have them installed)`);
  }
}
// The tests' PostgreSQL (`--test`, as `npm test` runs it): best effort, as root; without it the PostgreSQL tests fail saying how to start it.
if (process.argv.includes('--test') && !process.env.AWC_TEST_POSTGRES_URL && process.getuid?.() === 0) {
  const r = spawnSync('bash', [join(root, 'scripts', 'postgres-test-server.sh')], { stdio: ['ignore', 'ignore', 'inherit'] });
  if (r.status !== 0) console.error('awc setup: could not make PostgreSQL ready for the tests (scripts/postgres-test-server.sh)');
}
if (
  !existsSync(join(root, 'node_modules', 'better-sqlite3')) ||
  !existsSync(join(root, 'node_modules', 'pg')) ||
  !existsSync(join(root, 'node_modules', 'typescript'))
) {
  console.error('awc setup: installing npm dependencies');
  execFileSync('npm', ['install', '--no-audit', '--no-fund'], { cwd: root, stdio: ['ignore', 'inherit', 'inherit'] });
}
