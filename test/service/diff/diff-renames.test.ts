import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { awc, awcOk, readTreeInfo } from '../../helpers/cli.js';
import { detectRenames } from '../../../src/service/diff/diff-renames.js';
import { formatChanges, type Change } from '../../../src/service/diff/diff.js';
import type { Digest } from '../../../src/core/digest.js';

/**
 * `awc diff` reports a path whose content moved unchanged as a rename (issue 12 item 5):
 * renamed directories (matched by tree digest, their files with them), files (matched by
 * content digest, also after chmod) and symlinks; with `--patch`, git's exact-rename headers,
 * which `git apply` applies.
 */

function write(root: string, files: Record<string, string>): void {
  for (const [rel, data] of Object.entries(files)) {
    mkdirSync(dirname(join(root, rel)), { recursive: true });
    writeFileSync(join(root, rel), data);
  }
}

const COMMON = { 'keep.txt': 'kept\n', 'to/.keep': '' };

describe('awc diff: renames', () => {
  const work = mkdtempSync(join(tmpdir(), 'awc-diff-renames-'));
  const home = join(work, 'home');
  const a = join(work, 'a');
  const b = join(work, 'b');
  let sa: { id: string };
  let sb: { id: string };

  before(() => {
    write(a, {
      ...COMMON,
      'mv-dir/one': 'one\n',
      'mv-dir/sub/two': 'two\n',
      'from/moved/three': 'three\n',
      'f-rename': 'renamed file\n',
      'f-chmod': 'chmodded then renamed\n',
      'edited-and-moved': 'before\n',
      'empty-old': '',
    });
    symlinkSync('keep.txt', join(a, 'link-old'));
    write(b, {
      ...COMMON,
      'mv-dir-renamed/one': 'one\n',
      'mv-dir-renamed/sub/two': 'two\n',
      'to/moved/three': 'three\n',
      'f-renamed': 'renamed file\n',
      'g/f-chmodded': 'chmodded then renamed\n',
      'moved-and-edited': 'after\n',
      'empty-new': '',
    });
    chmodSync(join(b, 'g/f-chmodded'), 0o755);
    symlinkSync('keep.txt', join(b, 'link-new'));
    for (const d of [a, b]) execFileSync('sh', ['-c', 'find . -exec touch -h -d @1700000000 {} +'], { cwd: d });
    sa = awcOk(home, ['snapshot', 'import', a]);
    sb = awcOk(home, ['snapshot', 'import', b]);
  });
  after(() => rmSync(work, { recursive: true, force: true }));

  test('--json: one renamed change per moved path, the old name in `from`; edited and empty files stay added/deleted', () => {
    const d = awcOk(home, ['diff', sa.id, sb.id]);
    const byName = (x: (string | null)[], y: (string | null)[]): number => (x[1]! < y[1]! ? -1 : x[1]! > y[1]! ? 1 : 0);
    const brief = d.changes.map((c: Change) => [c.status, c.path, c.from ?? null]).sort(byName);
    const expected = [
      ['added', 'empty-new', null],
      ['deleted', 'empty-old', null],
      ['deleted', 'edited-and-moved', null],
      ['renamed', 'f-renamed', 'f-rename'],
      ['deleted', 'from', null],
      ['added', 'g', null],
      ['renamed', 'g/f-chmodded', 'f-chmod'],
      ['renamed', 'link-new', 'link-old'],
      ['added', 'moved-and-edited', null],
      ['renamed', 'mv-dir-renamed', 'mv-dir'],
      ['renamed', 'mv-dir-renamed/one', 'mv-dir/one'],
      ['renamed', 'mv-dir-renamed/sub', 'mv-dir/sub'],
      ['renamed', 'mv-dir-renamed/sub/two', 'mv-dir/sub/two'],
      ['renamed', 'to/moved', 'from/moved'],
      ['renamed', 'to/moved/three', 'from/moved/three'],
    ];
    // from/ itself is deleted; what it held moved to to/moved, so only from/ stays a deletion
    assert.deepEqual(brief, expected.sort(byName));
    const byPath = new Map(d.changes.map((c: Change) => [c.path, c]));
    const chmodded = byPath.get('g/f-chmodded') as Change;
    assert.equal(chmodded.old!.mode, 0o644);
    assert.equal(chmodded.new!.mode, 0o755);
    assert.equal(chmodded.old!.digest, chmodded.new!.digest);
    // nothing of the old names is left as a deletion, nothing of the new ones as an addition
    for (const p of ['f-rename', 'mv-dir', 'mv-dir/one', 'from/moved', 'link-old']) assert.equal(byPath.get(p), undefined, p);
    for (const p of ['f-renamed', 'mv-dir-renamed/one', 'to/moved/three', 'link-new'])
      assert.equal((byPath.get(p) as Change).status, 'renamed', p);
    for (const p of ['edited-and-moved', 'empty-old']) assert.equal((byPath.get(p) as Change).status, 'deleted', p);
    for (const p of ['moved-and-edited', 'empty-new']) assert.equal((byPath.get(p) as Change).status, 'added', p);
  });

  test('text output: R lines with the old name (and the mode change)', () => {
    const r = awc(home, ['diff', sa.id, sb.id], {}, { json: false });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^R {2}f-renamed \(from f-rename\)$/m);
    assert.match(r.stdout, /^R {2}g\/f-chmodded \(from f-chmod, 0644 → 0755\)$/m);
    assert.match(r.stdout, /^R {2}mv-dir-renamed\/ \(from mv-dir\/\)$/m);
  });

  test("--patch: git's exact-rename headers, and git apply turns the old tree into the new one", () => {
    const r = awc(home, ['diff', sa.id, sb.id, '--patch'], {}, { json: false });
    assert.equal(r.code, 0, r.stderr);
    const p = r.stdout;
    assert.ok(p.includes('diff --git a/f-rename b/f-renamed\nsimilarity index 100%\nrename from f-rename\nrename to f-renamed\n'), p);
    assert.ok(
      p.includes(
        'diff --git a/f-chmod b/g/f-chmodded\nold mode 100644\nnew mode 100755\nsimilarity index 100%\nrename from f-chmod\nrename to g/f-chmodded\n',
      ),
      p,
    );
    assert.ok(p.includes('rename from mv-dir/sub/two\nrename to mv-dir-renamed/sub/two\n'), p);
    assert.ok(p.includes('rename from link-old\nrename to link-new\n'), p);
    assert.ok(!p.includes('diff --git a/f-rename b/f-rename\n'), 'a renamed file is not also deleted');
    const repo = join(work, 'repo');
    execFileSync('cp', ['-a', a, repo]);
    writeFileSync(join(work, 'p.diff'), p);
    execFileSync('git', ['apply', join(work, 'p.diff')], { cwd: repo });
    assert.deepEqual(readTreeInfo(repo), readTreeInfo(b));
  });
});

describe('detectRenames', () => {
  const file = (path: string, status: 'added' | 'deleted', digest: string, size = 3): Change => {
    const s = { type: 'file' as const, mode: 0o644, size, digest: digest as Digest };
    return status === 'added' ? { path, status, kind: 'file', new: s } : { path, status, kind: 'file', old: s };
  };

  test('never pairs empty files; prefers a candidate with the same base name; leaves unmatched changes as they are', () => {
    const d = 'sha256:' + 'a'.repeat(64);
    const e = 'sha256:' + 'e'.repeat(64);
    const changes = [
      file('a/x', 'deleted', d),
      file('b/name', 'deleted', d),
      file('c/name', 'added', d),
      file('empty-1', 'deleted', e, 0),
      file('empty-2', 'added', e, 0),
      file('other', 'added', 'sha256:' + 'b'.repeat(64)),
    ];
    const out = detectRenames(changes);
    assert.deepEqual(
      out.map((c) => [c.status, c.path, c.from]),
      [
        ['deleted', 'a/x', undefined],
        ['renamed', 'c/name', 'b/name'],
        ['deleted', 'empty-1', undefined],
        ['added', 'empty-2', undefined],
        ['added', 'other', undefined],
      ],
    );
    assert.equal(formatChanges(out.slice(1, 2)), 'R  c/name (from b/name)\n');
    assert.equal(changes.length, 6, 'the input is not modified');
  });
});
