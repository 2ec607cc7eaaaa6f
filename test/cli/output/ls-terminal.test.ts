import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { awc, awcOk, CLI } from '../../helpers/cli.js';
import { tmuxPane, tmuxSkip } from '../../helpers/tmux.js';

/** The screen of `awc --home <home> ls` run on a terminal (tmux), once it ended with status 0; without the `[exit 0]` line. */
async function lsOnTerminal(home: string, env: NodeJS.ProcessEnv): Promise<string> {
  const pane = tmuxPane([process.execPath, CLI, '--home', home, 'ls'], { env });
  try {
    const screen = await pane.waitFor(/\[exit \d+\]/);
    assert.equal(pane.exitStatus(), 0, screen);
    return screen.replace(/\n?\[exit 0\]$/, '');
  } finally {
    pane.close();
  }
}

test(
  'awc ls on a terminal (issue 29): its empty message, then a table with a header and names; the same as without a terminal',
  { skip: tmuxSkip() },
  async () => {
    const work = mkdtempSync(join(tmpdir(), 'awc-ls-tty-'));
    try {
      const home = join(work, 'home');
      mkdirSync(join(work, 'src'));
      writeFileSync(join(work, 'src', 'a'), 'a\n');
      const env = { AWC_MOUNT_DRIVER: 'copy' };
      awcOk(home, ['snapshot', 'import', join(work, 'src'), '--name', 'base'], env);
      assert.match(await lsOnTerminal(home, env), /^no workspaces yet: fork one from a snapshot with `awc fork <snapshot> --name <name>`/);
      awcOk(home, ['fork', 'base', '--name', 'w1'], env);
      awcOk(home, ['fork', 'base', '--name', 'w2', '--label', 'team=red'], env);
      const screen = (await lsOnTerminal(home, env)).split('\n');
      assert.equal(screen.length, 3, screen.join('\n'));
      assert.match(screen[0]!, /^ID\s+NAME\s+STATE\s+PATH\s+OWNER\s+LEASE\s+AGE\s+LABELS$/);
      assert.match(screen[1]!, /^ws_\S+\s+w1\s+unmounted\s+-\s+-\s+-\s+\d+s\s+-$/);
      assert.match(screen[2]!, /^ws_\S+\s+w2\s+unmounted\s+-\s+-\s+-\s+\d+s\s+team=red$/);
      // without a terminal (a pipe, as scripts read it): the same lines
      const piped = awc(home, ['ls'], env, { json: false }).stdout.trimEnd().split('\n');
      assert.deepEqual(
        piped.map((l) => l.replace(/\d+s/, 'Ns')),
        screen.map((l) => l.replace(/\d+s/, 'Ns')),
      );
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  },
);
