import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { PROJECT, awc, awcOk, errorOf } from '../helpers/cli.js';
import { CONFIG_KEYS } from '../../src/config/config.js';

/** Hints name real commands; config.json keys are checked; refs resolve by kind or are refused as ambiguous; names are validated. */
describe('refs, names, configuration and hints', () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-refs-names-'));
  const home = join(work, 'home');
  const src = join(work, 'src');
  const env = { AWC_MOUNT_DRIVER: 'copy' };

  before(() => {
    mkdirSync(src);
    writeFileSync(join(src, 'f.txt'), 'f\n');
    awcOk(home, ['snapshot', 'import', src, '--name', 'base'], env);
  });
  after(() => rmSync(work, { recursive: true, force: true }));

  const expectError = (r: ReturnType<typeof awc>, code: string, exit: number) => {
    assert.equal(r.code, exit, r.stderr.slice(0, 500));
    const e = errorOf(r);
    assert.equal(e.code, code);
    assert.ok(e.hint.length > 0);
    return e;
  };

  test('every command a hint names exists', () => {
    const files: string[] = [];
    const walk = (dir: string) => {
      for (const n of readdirSync(dir)) {
        const p = join(dir, n);
        if (statSync(p).isDirectory()) walk(p);
        else if (n.endsWith('.ts')) files.push(p);
      }
    };
    walk(join(PROJECT, 'src'));
    const commands = new Set<string>();
    for (const f of files) {
      for (const line of readFileSync(f, 'utf8').split('\n')) {
        if (!/hint/.test(line)) continue;
        for (const m of line.matchAll(/`awc ([^`]*)`/g)) {
          const words: string[] = [];
          for (const w of m[1]!.split(' ')) {
            if (!/^[a-z][a-z-]*$/.test(w)) break;
            words.push(w);
          }
          if (words.length > 0) commands.add(words.join(' '));
        }
      }
    }
    assert.ok(commands.size >= 5, `found the hints' commands: ${[...commands].join(', ')}`);
    /** The command names (and aliases) the help of `awc <group>` lists. */
    const listed = (group: string[]): Set<string> => {
      const help = awc(home, [...group, '--help'], env, { json: false }).stdout;
      const names = new Set<string>();
      for (const line of help.slice(help.indexOf('Commands:')).split('\n').slice(1)) {
        const m = /^ {2}([a-z][a-z|-]*)/.exec(line);
        if (m) for (const n of m[1]!.split('|')) names.add(n);
      }
      return names;
    };
    const top = listed([]);
    for (const c of commands) {
      const [cmd, sub] = c.split(' ');
      assert.ok(top.has(cmd!), `a hint names \`awc ${c}\`: there is no command ${cmd}`);
      const subs = listed([cmd!]);
      if (subs.size > 0 && sub !== undefined) assert.ok(subs.has(sub), `a hint names \`awc ${c}\`: there is no command ${cmd} ${sub}`);
    }
  });

  test('config.json: camelCase keys only; an unknown key is E_CONFIG listing the valid ones', () => {
    const h = join(work, 'cfg-home');
    awcOk(h, ['snapshot', 'import', src], env);
    const cfg = join(h, 'config.json');
    writeFileSync(cfg, JSON.stringify({ AWC_CACHE_BYTES: 1024 }));
    let e = expectError(awc(h, ['ls'], env), 'E_CONFIG', 2);
    assert.match(e.message, /AWC_CACHE_BYTES/);
    for (const k of Object.keys(CONFIG_KEYS)) assert.ok(e.hint.includes(k), `the hint lists ${k}: ${e.hint}`);
    assert.match(e.hint, /"cacheBytes"/);
    writeFileSync(cfg, JSON.stringify({ mountdriver: 'copy' }));
    e = expectError(awc(h, ['ls'], env), 'E_CONFIG', 2);
    assert.match(e.message, /mountdriver/);
    writeFileSync(cfg, '[1, 2]');
    expectError(awc(h, ['ls'], env), 'E_CONFIG', 2);
    writeFileSync(cfg, JSON.stringify({ mountDriver: 'copy', cacheBytes: 0, packBytes: 2 * 1024 * 1024 }));
    assert.equal(awcOk(h, ['ls'], {}).workspaces.length, 0);
  });

  test('docs/reference/configuration.md lists every key with its environment variable', () => {
    const doc = readFileSync(join(PROJECT, 'docs', 'reference', 'configuration.md'), 'utf8');
    for (const [key, spec] of Object.entries(CONFIG_KEYS)) {
      assert.match(doc, new RegExp(`^\\| \`${key}\` \\| \`${spec.env}\` \\| `, 'm'), `${key} / ${spec.env} in configuration.md`);
    }
  });

  test('a name shared by a snapshot and a workspace: E_AMBIGUOUS where the command takes both kinds, resolved by kind elsewhere', () => {
    const ws = awcOk(home, ['fork', 'base', '--name', 'base'], env).workspaces[0].id; // fork says "snapshot"
    const snap = awcOk(home, ['show', 'snapshot:base'], env);
    assert.equal(snap.kind, 'snapshot');
    assert.equal(awcOk(home, ['show', 'workspace:base'], env).id, ws);
    for (const args of [
      ['show', 'base'],
      ['diff', 'base'],
      ['export', 'base', '--tar', join(work, 'amb.tar')],
    ]) {
      const e = expectError(awc(home, args, env), 'E_AMBIGUOUS', 2);
      assert.match(e.hint, /snapshot:base/);
      assert.match(e.hint, /workspace:base/);
    }
    // commands that say the kind resolve by it
    assert.equal(awcOk(home, ['fork', 'base'], env).workspaces.length, 1);
    assert.equal(awcOk(home, ['checkpoint', 'base'], env).changed, false);
    assert.equal(awcOk(home, ['fork', 'snapshot:base'], env).workspaces.length, 1);
    awcOk(home, ['export', 'workspace:base', '--tar', join(work, 'ws.tar')], env);
  });

  test('names are validated: no newlines or control characters, at most 128 characters, no "/", no ref prefix', () => {
    const before = awcOk(home, ['snapshot', 'ls'], env).snapshots.length;
    const bad = [
      'two\nlines',
      'tab\there',
      'x'.repeat(5000),
      'x'.repeat(129),
      'a/b',
      '..',
      ' padded',
      'snapshot:x',
      'workspace:y',
      'WS_upper',
      'bell\u0007',
    ];
    for (const name of bad) {
      const e = expectError(awc(home, ['snapshot', 'import', src, '--name', name], env), 'E_USAGE', 2);
      assert.match(e.hint, /1 to 128 characters/);
      assert.ok(e.message.length < 400, 'a long name is cut in the message');
      expectError(awc(home, ['fork', 'base', '--name', name], env), 'E_USAGE', 2);
    }
    assert.equal(awcOk(home, ['snapshot', 'ls'], env).snapshots.length, before, 'no snapshot was added');
    // --count appends -K: the final names are checked
    expectError(awc(home, ['fork', 'base', '--name', 'y'.repeat(127), '--count', '2'], env), 'E_USAGE', 2);
    const ok = 'ok name: é 日本 ' + 'z'.repeat(100);
    assert.equal(awcOk(home, ['snapshot', 'import', src, '--name', ok], env).name, ok);
    assert.equal(awcOk(home, ['fork', ok, '--name', 'w'.repeat(128)], env).workspaces[0].name, 'w'.repeat(128));
  });
  test('labels: set on import and fork, filter ls, change with awc label, shown, bad ones refused', () => {
    const s = awcOk(home, ['snapshot', 'import', src, '--label', 'awc.env-key=k1', '--label', 'team=a'], env);
    // a directory import also records where it came from (awc.path: the stable path of `awc run`)
    assert.deepEqual(s.labels, { 'awc.env-key': 'k1', 'awc.path': resolve(src), team: 'a' });
    const listed = awcOk(home, ['snapshot', 'ls', '--label', 'awc.env-key=k1'], env).snapshots;
    assert.deepEqual(
      listed.map((r: { id: string }) => r.id),
      [s.id],
    );
    const [w] = awcOk(home, ['fork', s.id, '--label', 'awc.claude.session=s1'], env).workspaces;
    awcOk(home, ['fork', s.id], env);
    assert.deepEqual(
      awcOk(home, ['ls', '--label', 'awc.claude.session=s1'], env).workspaces.map((r: { id: string }) => r.id),
      [w.id],
    );
    assert.deepEqual(awcOk(home, ['label', w.id, 'x=1', 'awc.claude.session-'], env), { kind: 'workspace', id: w.id, labels: { x: '1' } });
    assert.deepEqual(awcOk(home, ['show', w.id], env).labels, { x: '1' });
    const text = awc(home, ['show', s.id], env, { json: false }).stdout;
    assert.match(text, /labels: +\[awc\.env-key=k1, awc\.path=\S+, team=a\]/);
    expectError(awc(home, ['fork', s.id, '--label', 'Bad=1'], env), 'E_USAGE', 2);
    expectError(awc(home, ['label', s.id, 'novalue'], env), 'E_USAGE', 2);
    expectError(awc(home, ['snapshot', 'import', src, '--label', 'a=b\nc'], env), 'E_USAGE', 2);
    assert.equal(awcOk(home, ['ls', '--label', 'x=1'], env).workspaces.length, 1, 'the refused fork made nothing');
  });
});
