import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildProgram } from '../../../src/cli/entry/program.js';
import { CLI } from '../../helpers/cli.js';
import { tempDirFor } from '../../helpers/temp-dir.js';

/**
 * `awc completion bash|zsh|fish` and `npm run man` (src/cli/output/completion-scripts.ts,
 * man-pages.ts): the scripts and pages come from the program's definitions, so these checks run
 * against what the built CLI prints. bash is always there; zsh, fish and groff are checked where
 * installed (.ci/run installs them) and skipped with the reason elsewhere.
 */

const TOP = buildProgram()
  .program.commands.map((c) => c.name())
  .filter((n) => n !== 'help');

/** What `awc completion <shell>` prints (fails on a non-zero status). */
function script(shell: string): string {
  const r = spawnSync(process.execPath, [CLI, 'completion', shell], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout;
}

/** Whether `cmd` is on PATH. */
function has(cmd: string): boolean {
  return spawnSync('sh', ['-c', `command -v ${cmd}`]).status === 0;
}

/** Runs bash's completion function on `words` (the last one being completed) after sourcing `file`: the candidates. */
const BASH_DRIVER = `source "$1"; shift
complete -p awc
c() { COMP_WORDS=("$@"); COMP_CWORD=$((\${#COMP_WORDS[@]} - 1)); COMPREPLY=(); _awc; echo "\${COMPREPLY[*]}"; }
c awc sn
c awc snapshot ''
c awc ls --
c awc ''
c awc --home /tmp/h snapshot import --name x --
c awc completion ''
c awc umount --d
c awc snapshot import --name ''
c awc --home = /tmp/h snapshot ''
`;

test('bash: sourcing the script registers `complete -F _awc awc`, and COMP_WORDS completes commands, subcommands and options', async (t) => {
  const dir = await tempDirFor(t, 'awc-compl-');
  const file = join(dir, 'awc.bash');
  writeFileSync(file, script('bash'));
  const r = spawnSync('bash', ['-c', BASH_DRIVER, 'bash', file], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stderr, '');
  const [spec, sn, snapshot, ls, all, imp, shells, alias, value, split] = r.stdout.split('\n');
  assert.equal(spec, 'complete -o default -F _awc awc');
  assert.equal(sn, 'snapshot');
  assert.deepEqual(snapshot.split(' ').sort(), ['import', 'ls']);
  assert.ok(ls.split(' ').includes('--json') && ls.split(' ').includes('--label'), ls);
  assert.deepEqual(all.split(' ').sort(), [...TOP].sort(), 'every top-level command');
  assert.ok(imp.split(' ').includes('--allow-changing') && imp.split(' ').includes('--home'), imp);
  assert.equal(shells, 'bash zsh fish');
  assert.equal(alias, '--discard', '`umount` is unmount: its options');
  assert.equal(value, '', "an option's value: nothing offered, so bash's default (files) applies");
  assert.equal(split, 'import ls', '`--home=DIR` (bash splits it at `=`) is an option and its value');
});

/**
 * Runs zsh's `_awc` on words (the last one being completed) with zsh's completion builtins
 * replaced by functions that print what they were given (`_describe`: the names; `compadd`:
 * the words; `_files`: `(files)`). zsh filters by the typed prefix itself, so a level lists all.
 */
const ZSH_DRIVER = `compdef() { :; }
source "$1"
_describe() { print -r -- "\${(j: :)\${(@)\${(@P)4}%%:*}}"; }
compadd() { print -r -- "\${(j: :)\${(@P)2}}"; }
_files() { print -r -- '(files)'; }
c() { words=("$@"); CURRENT=$#; PREFIX=\${words[-1]}; _awc; }
c awc sn
c awc snapshot ''
c awc ls --
c awc completion ''
c awc --home /x snapshot import --name ''
c awc umount --d
`;

test(
  'zsh: the script parses (zsh -n), and _awc offers commands, subcommands, options and values',
  { skip: !has('zsh') && 'zsh is not installed (.ci/run installs it)' },
  async (t) => {
    const dir = await tempDirFor(t, 'awc-compl-');
    const file = join(dir, '_awc');
    const text = script('zsh');
    assert.ok(text.startsWith('#compdef awc\n'));
    writeFileSync(file, text);
    const parse = spawnSync('zsh', ['-n', file], { encoding: 'utf8' });
    assert.equal(parse.status, 0, parse.stderr);
    const r = spawnSync('zsh', ['-f', '-c', ZSH_DRIVER, 'zsh', file], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    const [top, snapshot, ls, shells, value, alias] = r.stdout.split('\n').map((l) => l.split(' '));
    assert.deepEqual([...top].sort(), [...TOP].sort(), 'every top-level command');
    assert.deepEqual(snapshot.sort(), ['import', 'ls']);
    assert.ok(ls.includes('--json') && ls.includes('--label'), ls.join(' '));
    assert.deepEqual(shells, ['bash', 'zsh', 'fish']);
    assert.deepEqual(value, ['(files)'], "an option's value: files");
    assert.ok(alias.includes('--discard'), '`umount` is unmount: its options');
  },
);

test(
  'fish: the script parses (fish -n) and `complete -C` completes subcommands and options',
  { skip: !has('fish') && 'fish is not installed (.ci/run installs it)' },
  async (t) => {
    const dir = await tempDirFor(t, 'awc-compl-');
    const file = join(dir, 'awc.fish');
    writeFileSync(file, script('fish'));
    assert.equal(spawnSync('fish', ['-n', file], { encoding: 'utf8' }).status, 0);
    const r = spawnSync(
      'fish',
      [
        '--no-config',
        '-c',
        `source ${file}; complete -C 'awc sn'; echo ==; complete -C 'awc snapshot '; echo ==; complete -C 'awc ls --j'`,
      ],
      { encoding: 'utf8', env: { ...process.env, HOME: dir, XDG_CONFIG_HOME: dir, XDG_DATA_HOME: dir } },
    );
    assert.equal(r.status, 0, r.stderr);
    const [sn, snapshot, json] = r.stdout.split('==\n').map((s) =>
      s
        .trim()
        .split('\n')
        .map((l) => l.split('\t')[0]),
    );
    assert.deepEqual(sn, ['snapshot']);
    assert.deepEqual(snapshot.sort(), ['import', 'ls']);
    assert.deepEqual(json, ['--json']);
  },
);

test('man: `npm run man` writes awc(1) and one page per top-level command; groff renders each without a warning', async (t) => {
  const dir = await tempDirFor(t, 'awc-man-');
  const main = fileURLToPath(new URL('../../../src/cli/entry/man-main.js', import.meta.url));
  const w = spawnSync(process.execPath, [main, dir], { encoding: 'utf8' });
  assert.equal(w.status, 0, w.stderr);
  assert.deepEqual(readdirSync(dir).sort(), ['awc.1', ...TOP.map((c) => `awc-${c}.1`)].sort());
  const top = readFileSync(join(dir, 'awc.1'), 'utf8');
  for (const c of TOP) assert.ok(top.includes(`.TP\n\\fB${c.replace(/-/g, '\\-')}\\fR\n`), `awc.1 lists ${c}`);
  assert.match(readFileSync(join(dir, 'awc-snapshot.1'), 'utf8'), /\\fB\\-\\-allow\\-changing\\fR/);
  if (!has('groff')) return t.skip('groff is not installed (groff-base; .ci/run installs it)');
  for (const f of readdirSync(dir)) {
    const r = spawnSync('groff', ['-ww', '-man', '-Tutf8', '-P', '-cbou', join(dir, f)], { encoding: 'utf8' });
    assert.equal(r.status, 0, `${f}: ${r.stderr}`);
    assert.equal(r.stderr, '', `${f} renders without warnings`);
    if (f === 'awc.1') for (const c of TOP) assert.match(r.stdout, new RegExp(`^ {7}${c}\\b`, 'm'), `rendered awc(1) lists ${c}`);
  }
  const snap = spawnSync('groff', ['-man', '-Tutf8', '-P', '-cbou', join(dir, 'awc-snapshot.1')], { encoding: 'utf8' }).stdout;
  assert.match(snap, /awc snapshot import \[options\] \[source\]/);
  assert.match(snap, /--label <key=value>\n\s+label the snapshot \(repeatable\) \(default: \[\]\)/);
});
