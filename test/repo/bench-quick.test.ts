import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { detectDriver } from '../../src/drivers/detect/detect-driver.js';
import { FIGURE_IDS, QUICK_LARGE_TREE_ONLY } from '../../bench/common.js';

/**
 * The benchmark suite cannot rot: `bench/run.js --quick --json` runs every figure on small
 * inputs (tree (a) only, 10 workspaces, no network) and must exit 0 with a numeric value for
 * every figure (but those a quick run measures on tree (c) only: QUICK_LARGE_TREE_ONLY). Timings are not asserted: they belong to docs/benchmarks.md, not to a test.
 * Its scratch (`--cache-dir`) is a tmpfs mounted for the test: removing a run's 100k files from a
 * journal-less ext4 took 30 s to 3 min of the test's time; unmounting a tmpfs takes none.
 */
const RUN = fileURLToPath(new URL('../../bench/run.js', import.meta.url));
const possible = process.getuid?.() === 0 && detectDriver('auto').driver === 'overlay';

test(
  'bench --quick --json produces every figure with numeric values',
  { skip: possible ? false : 'needs root and the overlay driver (see awc doctor)', timeout: 600_000 },
  (t) => {
    const scratch = mkdtempSync(join(tmpdir(), 'awc-bench-quick-'));
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=6g,mode=0700,nosuid,nodev', 'tmpfs', scratch]);
    t.after(() => {
      spawnSync('umount', ['-l', scratch]);
      rmSync(scratch, { recursive: true, force: true });
    });
    const r = spawnSync(process.execPath, [RUN, '--quick', '--json', '--cache-dir', scratch], {
      encoding: 'utf8',
      maxBuffer: 64 * 1024 * 1024,
      timeout: 590_000,
    });
    assert.equal(r.status, 0, `bench exited ${r.status}${r.signal ? ` (${r.signal})` : ''}:\n${r.stderr.slice(-4000)}`);
    const out = JSON.parse(r.stdout) as {
      quick: boolean;
      machine: { cpu: string; cores: number; ramBytes: number; kernel: string; diskFs: string; node: string };
      trees: { label: string; files: number; bytes: number }[];
      figures: { id: string; tree: string; awc: unknown; baseline: unknown; ratio: unknown; met: unknown; target: string }[];
    };
    assert.equal(out.quick, true);
    assert.ok(out.machine.cores > 0 && out.machine.ramBytes > 0 && out.machine.kernel !== '' && out.machine.node.startsWith('v'));
    assert.deepEqual(
      out.trees.map((t) => t.label),
      ['a'],
    );
    assert.ok(out.trees[0].files > 100 && out.trees[0].bytes > 1_000_000, 'tree (a) is a real tree');
    for (const id of FIGURE_IDS) {
      // measured in --quick only on tree (c), which this run does not select
      if (QUICK_LARGE_TREE_ONLY.includes(id)) {
        assert.ok(!out.figures.some((x) => x.id === id), `${id} is not measured on tree (a) in --quick`);
        continue;
      }
      const f = out.figures.find((x) => x.id === id && x.tree === 'a');
      assert.ok(f, `figure ${id} is missing`);
      assert.equal(typeof f.awc, 'number', `${id}: AWC value`);
      assert.ok(Number.isFinite(f.awc as number) && (f.awc as number) >= 0, `${id}: AWC value ${f.awc}`);
      if (id !== 'daemon-rss') {
        assert.equal(typeof f.baseline, 'number', `${id}: baseline`);
        assert.ok(Number.isFinite(f.baseline as number), `${id}: baseline ${f.baseline}`);
      }
      assert.ok(f.ratio === null || typeof f.ratio === 'number', `${id}: ratio`);
      assert.ok(f.met === null || typeof f.met === 'boolean', `${id}: met`);
      assert.ok(f.target.length > 0, `${id}: target`);
    }
  },
);
