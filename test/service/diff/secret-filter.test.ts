/**
 * The capture classes and the secret filter (docs/explanation/capture-classes.md), on both
 * real drivers through the built CLI: only the opted-in secret reaches the snapshot and the
 * object store, the others are listed and stay on the host, node_modules is kept, tmp is
 * dropped, a diff of the live workspace marks the secrets (never in its patch), a remove keeps
 * the secrets (restorable) and refuses only for an ordinary pending change, a directory or
 * tar import skips its secrets, and a bad `.awc.json` is E_CONFIG.
 */
import { strict as assert } from 'node:assert';
import { randomBytes } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { existsSync, linkSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { awc, awcOk, cleanupMounts, errorOf } from '../../helpers/cli.js';
import { markSecrets } from '../../../src/service/diff/diff-secrets.js';
import type { Change } from '../../../src/service/diff/diff.js';

/** Every file's bytes under `dir`, concatenated (packs, catalog). */
function allBytes(dir: string): Buffer {
  const parts: Buffer[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (e.isFile()) parts.push(readFileSync(join(e.parentPath, e.name)));
  }
  return Buffer.concat(parts);
}

const marker = (what: string): string => `${what}-${randomBytes(24).toString('base64url')}`;

function put(root: string, rel: string, data: string): void {
  mkdirSync(dirname(join(root, rel)), { recursive: true });
  writeFileSync(join(root, rel), data);
}

describe('markSecrets: the status of a live secret against the stored side', () => {
  it('a stored file at its path: modified or unchanged by content, and no longer a deletion; else added', () => {
    const file = (digest: `sha256:${string}`) => ({ type: 'file' as const, mode: 0o600, size: 3, digest });
    const changes: Change[] = [
      { path: '.env', status: 'deleted', kind: 'file', old: file('sha256:aa') },
      { path: '.env.prod', status: 'deleted', kind: 'file', old: file('sha256:bb') },
      { path: 'gone.txt', status: 'deleted', kind: 'file', old: file('sha256:cc') },
    ];
    const r = markSecrets(changes, {
      secrets: [
        { path: '.env', size: 3, digest: 'sha256:aa' },
        { path: '.env.prod', size: 4, digest: 'sha256:dd' },
        { path: 'id_rsa', size: 5, digest: 'sha256:ee' },
      ],
      dropped: [],
    });
    assert.deepEqual(
      r.changes.map((c) => c.path),
      ['gone.txt'],
    );
    assert.deepEqual(r.secrets, [
      { path: '.env', size: 3, status: 'unchanged' },
      { path: '.env.prod', size: 4, status: 'modified' },
      { path: 'id_rsa', size: 5, status: 'added' },
    ]);
  });
});

describe('capture classes and the secret filter', () => {
  let work: string;
  let home: string;
  let env: NodeJS.ProcessEnv;
  let base: string;

  before(() => {
    work = mkdtempSync(join(tmpdir(), 'awc-secrets-'));
    home = join(work, 'home');
    env = { AWC_OBJECT_STORE: `file:${join(work, 'objects')}`, AWC_CATALOG: `sqlite:${join(work, 'catalog', 'awc.db')}` };
    const src = join(work, 'src');
    put(src, 'README.md', 'tracked\n');
    put(src, '.gitignore', 'node_modules/\ntmp/\n');
    put(src, '.awc.json', JSON.stringify({ allowSecrets: ['config/dev.pem'] }));
    put(src, '.env', marker('IMPORTED') + '\n');
    put(src, '.env.example', 'KEY=\n');
    const r = awcOk(home, ['snapshot', 'import', src, '--name', 'base'], env);
    // a directory import skips its secrets (and keeps the template)
    assert.deepEqual(
      r.secrets.map((s: { path: string }) => s.path),
      ['.env'],
    );
    base = r.id;
  });
  after(() => {
    cleanupMounts(home, work, env);
    rmSync(work, { recursive: true, force: true });
  });

  it('a tar import leaves its secrets out (opted in by the .awc.json at its root, even last in the archive) and lists them', () => {
    const src = join(work, 'tarsrc');
    const secrets: Record<string, string> = {
      '.env': marker('TARENV'),
      id_rsa: marker('TARKEY'),
      'sub/credentials.json': marker('TARCRED'),
      'sub/.npmrc': `//registry.npmjs.org/:_authToken=${marker('TARNPM')}\n`,
    };
    for (const [p, v] of Object.entries(secrets)) put(src, p, v);
    const optedIn = marker('TAROPTED');
    put(src, 'keys/deploy.pem', optedIn);
    put(src, 'node_modules/x/fixture.pem', 'public test fixture\n');
    put(src, 'README.md', 'readme\n');
    put(src, '.awc.json', JSON.stringify({ allowSecrets: ['keys/'] }));
    linkSync(join(src, '.env'), join(src, 'env-copy')); // a second name of a secret: its bytes are the secret's
    const tar = join(work, 'x.tar');
    const order = ['./.env', './env-copy', './id_rsa', './sub', './keys', './node_modules', './README.md', './.awc.json'];
    execFileSync('tar', ['--format=pax', '-C', src, '-cf', tar, ...order]);
    const r = awcOk(home, ['snapshot', 'import', tar, '--name', 'from-tar'], env);
    assert.deepEqual(
      r.secrets.map((x: { path: string }) => x.path),
      ['.env', 'env-copy', 'id_rsa', 'sub/.npmrc', 'sub/credentials.json'],
    );
    const out = join(work, 'out-tar');
    awcOk(home, ['export', r.id, '--dir', out], env);
    assert.equal(readFileSync(join(out, 'keys/deploy.pem'), 'utf8'), optedIn);
    assert.ok(existsSync(join(out, 'node_modules/x/fixture.pem')) && existsSync(join(out, 'README.md')));
    for (const p of [...Object.keys(secrets), 'env-copy']) assert.ok(!existsSync(join(out, p)), `${p} must not be in the snapshot`);
    const stored = allBytes(join(work, 'objects')).toString('latin1');
    assert.ok(stored.includes(optedIn));
    for (const [p, v] of Object.entries(secrets)) assert.ok(!stored.includes(v.trim().split('=').pop()!), `${p} reached the store`);
  });

  it('PEM files by content (issue 24 item 8): CA bundles and certificates are kept, any private key block is a secret, .p12/.pfx/.jks and a DER .key by name', () => {
    const tls = join(work, 'pem-gen');
    mkdirSync(tls);
    const sh = (cmd: string): string =>
      execFileSync('sh', ['-c', cmd], { cwd: tls, encoding: 'latin1', stdio: ['ignore', 'pipe', 'ignore'] });
    sh('openssl req -x509 -newkey rsa:2048 -nodes -keyout pkcs8.pem -out cert.pem -subj /CN=awc-test -days 1');
    const cert = readFileSync(join(tls, 'cert.pem'), 'latin1');
    const bundle = readFileSync('/etc/ssl/certs/ca-certificates.crt', 'latin1'); // a real CA bundle, ~220 KB
    assert.ok(bundle.length > 128 * 1024 && bundle.length < 1024 * 1024);
    const keys: Record<string, string> = {
      'tls/pkcs8.pem': readFileSync(join(tls, 'pkcs8.pem'), 'latin1'),
      'tls/server.key': sh('openssl genrsa -traditional 2048'),
      'tls/ec.pem': sh('openssl ecparam -genkey -name prime256v1'),
      'tls/enc.key': sh('openssl pkcs8 -topk8 -in pkcs8.pem -v2 aes256 -passout pass:x'),
      'tls/dsa.pem': `-----BEGIN DSA PRIVATE KEY-----\n${randomBytes(300).toString('base64')}\n-----END DSA PRIVATE KEY-----\n`,
      'ssh/deploy.pem': (sh("ssh-keygen -q -t ed25519 -N '' -C t -f ed"), readFileSync(join(tls, 'ed'), 'latin1')),
    };
    const src = join(work, 'pem-src');
    const kept: Record<string, Buffer> = {
      'certifi/cacert.pem': Buffer.from(bundle, 'latin1'),
      'gcloud/roots.pem': Buffer.from(`# roots\n${cert}\n# another\n${cert}`, 'latin1'),
      'tls/server.crt': Buffer.from(cert, 'latin1'),
      'tls/server.cer': execFileSync('openssl', ['x509', '-in', join(tls, 'cert.pem'), '-outform', 'DER']),
      'tls/public.key': execFileSync('openssl', ['pkey', '-in', join(tls, 'pkcs8.pem'), '-pubout']),
    };
    for (const [p, b] of Object.entries(kept)) {
      mkdirSync(dirname(join(src, p)), { recursive: true });
      writeFileSync(join(src, p), b);
    }
    for (const [p, v] of Object.entries(keys)) put(src, p, v);
    // a key after 200 KB of certificates, a key in a .crt, a DER key, stores by name, a PEM file past the 1 MiB the filter reads
    put(src, 'tls/bundle-and-key.pem', bundle + keys['tls/pkcs8.pem']);
    put(src, 'tls/cert-and-key.crt', cert + keys['tls/server.key']);
    mkdirSync(join(src, 'bin'));
    writeFileSync(join(src, 'bin/der.key'), execFileSync('openssl', ['pkey', '-in', join(tls, 'pkcs8.pem'), '-outform', 'DER']));
    sh(`openssl pkcs12 -export -in cert.pem -inkey pkcs8.pem -passout pass:x -out ${join(src, 'bin/id.p12')}`);
    writeFileSync(join(src, 'bin/id.pfx'), readFileSync(join(src, 'bin/id.p12')));
    writeFileSync(join(src, 'bin/store.jks'), randomBytes(512));
    put(src, 'big/huge-bundle.pem', bundle.repeat(5));
    const secrets = [
      ...Object.keys(keys),
      'tls/bundle-and-key.pem',
      'tls/cert-and-key.crt',
      'bin/der.key',
      'bin/id.p12',
      'bin/id.pfx',
      'bin/store.jks',
      'big/huge-bundle.pem',
    ].sort();
    const tar = join(work, 'pem.tar');
    execFileSync('tar', ['--format=pax', '-C', src, '-cf', tar, '.']);
    for (const from of [src, tar]) {
      const r = awcOk(home, ['snapshot', 'import', from], env);
      assert.deepEqual(r.secrets.map((x: { path: string }) => x.path).sort(), secrets, from);
      const out = join(work, `pem-out-${from === src ? 'dir' : 'tar'}`);
      awcOk(home, ['export', r.id, '--dir', out], env);
      for (const [p, b] of Object.entries(kept)) assert.ok(readFileSync(join(out, p)).equals(b), `${p} kept as it was (${from})`);
      for (const p of secrets) assert.ok(!existsSync(join(out, p)), `${p} must not be in the snapshot (${from})`);
    }
    // no private key's bytes reached the store
    const stored = allBytes(join(work, 'objects')).toString('latin1');
    for (const [p, v] of Object.entries(keys)) assert.ok(!stored.includes(v.split('\n')[1]), `${p} reached the store`);
  });

  it('PEM labels with hyphens are private keys, and a tar hardlink named *.pem is judged by its content (issue 24 review)', () => {
    const cert = execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'ec',
        '-pkeyopt',
        'ec_paramgen_curve:prime256v1',
        '-nodes',
        '-keyout',
        '/dev/null',
        '-subj',
        '/CN=awc-hyphen',
        '-days',
        '1',
      ],
      { encoding: 'latin1', stdio: ['ignore', 'pipe', 'ignore'] },
    );
    const block = (label: string): string => `-----BEGIN ${label}-----\n${randomBytes(120).toString('base64')}\n-----END ${label}-----\n`;
    const bundle = readFileSync('/etc/ssl/certs/ca-certificates.crt');
    const src = join(work, 'hyphen-src');
    const keys: Record<string, string> = {
      'a/openssh.crt': cert + block('OPENSSH-PRIVATE KEY'),
      'a/vendor.pem': cert + block('X-VENDOR PRIVATE KEY'),
      'a/pgp.cer': cert + block('PGP PRIVATE KEY BLOCK'),
      'a/sm2.crt': cert + block('SM2-PRIVATE-KEY'),
    };
    for (const [p, v] of Object.entries(keys)) put(src, p, v);
    put(src, 'a/plain.crt', cert);
    mkdirSync(join(src, 'certs'));
    writeFileSync(join(src, 'certs/ca.pem'), bundle);
    linkSync(join(src, 'certs/ca.pem'), join(src, 'certs/roots.pem')); // a second name of a CA bundle
    writeFileSync(join(src, 'certs/bundle'), bundle);
    linkSync(join(src, 'certs/bundle'), join(src, 'certs/cacert.pem'));
    put(src, 'certs/keyfile', keys['a/openssh.crt']);
    linkSync(join(src, 'certs/keyfile'), join(src, 'certs/key-link.pem')); // a second name of a key (stored under its first)
    const tar = join(work, 'hyphen.tar');
    // the first name of each file first, so that the others are tar hardlinks
    const order = ['a', 'certs/ca.pem', 'certs/bundle', 'certs/keyfile', 'certs/roots.pem', 'certs/cacert.pem', 'certs/key-link.pem'];
    execFileSync('tar', ['--format=pax', '--no-recursion', '-C', src, '-cf', tar, ...order, ...Object.keys(keys), 'a/plain.crt']);
    const listed = execFileSync('tar', ['-tvf', tar], { encoding: 'utf8' });
    assert.match(listed, /^h.* certs\/roots\.pem link to certs\/ca\.pem$/m);
    assert.match(listed, /^h.* certs\/cacert\.pem link to certs\/bundle$/m);
    const secrets = [...Object.keys(keys), 'certs/key-link.pem'].sort();
    for (const from of [tar, src]) {
      const r = awcOk(home, ['snapshot', 'import', from], env);
      assert.deepEqual(r.secrets.map((x: { path: string }) => x.path).sort(), secrets, from);
      const out = join(work, `hyphen-out-${from === src ? 'dir' : 'tar'}`);
      awcOk(home, ['export', r.id, '--dir', out], env);
      for (const p of ['certs/ca.pem', 'certs/roots.pem', 'certs/bundle', 'certs/cacert.pem'])
        assert.ok(readFileSync(join(out, p)).equals(bundle), `${p} kept (${from})`);
      assert.equal(statSync(join(out, 'certs/roots.pem')).ino, statSync(join(out, 'certs/ca.pem')).ino, 'still one file');
      assert.equal(readFileSync(join(out, 'a/plain.crt'), 'latin1'), cert);
      for (const p of secrets) assert.ok(!existsSync(join(out, p)), `${p} must not be in the snapshot (${from})`);
    }
  });

  for (const driver of ['overlay', 'copy'] as const) {
    it(`${driver}: a checkpoint stores only the opted-in secret, lists the others, keeps node_modules, drops tmp; rm keeps the secrets`, () => {
      const denv = { ...env, AWC_MOUNT_DRIVER: driver };
      const ws = awcOk(home, ['fork', base, '--name', `ws-${driver}`], denv).workspaces[0].id as string;
      const mnt = join(work, `mnt-${driver}`);
      awcOk(home, ['mount', ws, mnt], denv);
      const secrets: Record<string, string> = {
        '.env': marker('ENV'),
        '.env.local': marker('ENVLOCAL'),
        id_rsa: marker('KEY'),
        'credentials.json': marker('CRED'),
        'sub/.npmrc': `//registry.npmjs.org/:_authToken=${marker('NPM')}\n`,
      };
      for (const [p, v] of Object.entries(secrets)) put(mnt, p, v);
      const optedIn = marker('OPTED');
      put(mnt, 'config/dev.pem', optedIn);
      put(mnt, 'node_modules/x/index.js', 'module.exports = 1;\n');
      put(mnt, 'node_modules/x/test/fixture.pem', 'public test fixture\n');
      put(mnt, 'tmp/y', marker('SCRATCH'));
      put(mnt, 'README.md', 'tracked, changed\n');
      put(mnt, 'plain.npmrc/.npmrc', 'registry=https://example.org/\n');

      // diff of the live workspace: the secrets are marked, not stored changes; scratch listed as dropped
      const d = awcOk(home, ['diff', ws], denv);
      assert.deepEqual(
        d.secrets.map((x: { path: string; status: string }) => `${x.status} ${x.path}`).sort(),
        Object.keys(secrets)
          .map((p) => `added ${p}`)
          .sort(),
      );
      const changed = d.changes.map((c: { path: string }) => c.path);
      for (const p of Object.keys(secrets)) assert.ok(!changed.includes(p), `${p} shown as a stored change`);
      assert.ok(changed.includes('config/dev.pem') && changed.includes('README.md'));
      assert.deepEqual(
        d.dropped.map((x: { path: string }) => x.path),
        ['tmp/'],
      );
      const text = awc(home, ['diff', ws], denv, { json: false }).stdout;
      assert.match(text, /^S {2}\.env \(secret, new: not stored/m);
      assert.match(text, /^S {2}sub\/\.npmrc \(secret, new/m);
      assert.match(text, /^X {2}tmp\/ \(scratch/m);
      assert.match(text, /^A {2}config\/dev\.pem$/m);
      const patch = awc(home, ['diff', ws, '--patch'], denv, { json: false });
      const jsonPatch = awcOk(home, ['diff', ws, '--patch'], denv).patch as string;
      assert.ok(patch.stdout.includes(optedIn) && jsonPatch.includes(optedIn), 'the opted-in secret is a stored change');
      assert.match(patch.stderr, /^S {2}\.env \(secret/m);
      for (const [p, v] of Object.entries(secrets)) {
        const bytes = v.trim().split('=').pop()!;
        assert.ok(!patch.stdout.includes(bytes) && !jsonPatch.includes(bytes) && !patch.stdout.includes(` b/${p}`), `${p} in the patch`);
      }

      const cp = awcOk(home, ['checkpoint', ws], denv);
      assert.equal(cp.changed, true);
      assert.deepEqual(cp.secrets.map((s: { path: string }) => s.path).sort(), Object.keys(secrets).sort());
      assert.deepEqual(
        cp.dropped.map((d: { path: string; files: number }) => [d.path, d.files]),
        [['tmp/', 1]],
      );
      assert.deepEqual(cp.classes.reconstructible.files, 2);
      assert.equal(cp.classes.secret.files, 5);
      assert.equal(cp.classes.scratch.files, 1);

      // the snapshot's tree: the opted-in secret and node_modules, no other secret, no tmp
      const out = join(work, `out-${driver}`);
      awcOk(home, ['export', cp.id, '--dir', out], denv);
      assert.equal(readFileSync(join(out, 'config/dev.pem'), 'utf8'), optedIn);
      assert.ok(existsSync(join(out, 'node_modules/x/test/fixture.pem')));
      assert.ok(existsSync(join(out, 'plain.npmrc/.npmrc')), 'an .npmrc without a token is no secret');
      for (const p of [...Object.keys(secrets), 'tmp']) assert.ok(!existsSync(join(out, p)), `${p} must not be in the snapshot`);
      // ... and their bytes are in no object of the store and not in the catalog (the opted-in one is: the grep works)
      const stored = Buffer.concat([allBytes(join(work, 'objects')), allBytes(join(work, 'catalog'))]).toString('latin1');
      assert.ok(stored.includes(optedIn));
      for (const [p, v] of Object.entries(secrets)) assert.ok(!stored.includes(v.trim().split('=').pop()!), `${p} reached the store`);
      // the mount still shows them
      for (const [p, v] of Object.entries(secrets)) assert.equal(readFileSync(join(mnt, p), 'utf8'), v);

      // a bad project file refuses the checkpoint with E_CONFIG
      writeFileSync(join(mnt, '.awc.json'), '{"allowSecret": []}');
      const bad = awc(home, ['checkpoint', ws], denv);
      assert.equal(errorOf(bad).code, 'E_CONFIG');
      assert.match(errorOf(bad).message, /unknown key "allowSecret"/);
      writeFileSync(join(mnt, '.awc.json'), JSON.stringify({ allowSecrets: ['config/dev.pem'] }));

      // removing the workspace loses none of them: kept (0600), restorable. Overlay: the unmount keeps the upper (its
      // secrets); an ordinary change there refuses rm, secrets alone do not. Copy: the unmount refuses, rm --force keeps them.
      let rm;
      if (driver === 'overlay') {
        writeFileSync(join(mnt, 'late.txt'), 'not checkpointed\n');
        awcOk(home, ['unmount', ws], denv);
        const refused = awc(home, ['rm', ws], denv);
        assert.equal(errorOf(refused).code, 'E_IN_USE');
        assert.equal(awcOk(home, ['kept', 'ls', ws], denv).sets.length, 0, 'a refused rm keeps nothing');
        awcOk(home, ['mount', ws, mnt], denv);
        assert.equal(awcOk(home, ['checkpoint', ws], denv).changed, true);
        assert.equal(awcOk(home, ['unmount', ws], denv).pending, true, 'the secrets keep the upper');
        rm = awcOk(home, ['rm', ws], denv);
        assert.equal(rm.discarded, undefined);
      } else {
        assert.equal(errorOf(awc(home, ['unmount', ws], denv)).code, 'E_IN_USE');
        rm = awcOk(home, ['rm', ws, '--force'], denv);
      }
      assert.deepEqual(rm.kept.map((k: { path: string }) => k.path).sort(), Object.keys(secrets).sort());
      for (const k of rm.kept) assert.equal(statSync(k.keptAt).mode & 0o777, 0o600);
      const back = join(work, `back-${driver}`);
      mkdirSync(back);
      awcOk(home, ['kept', 'restore', ws, back], denv);
      for (const [p, v] of Object.entries(secrets)) assert.equal(readFileSync(join(back, p), 'utf8'), v);
      assert.equal(errorOf(awc(home, ['kept', 'restore', ws, back], denv)).code, 'E_TARGET_EXISTS');
    });
  }
});
