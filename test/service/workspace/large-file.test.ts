/**
 * Issue 12, fidelity item 11: a file of 8 GiB + 1 byte of random data round-trips through
 * `export --tar` and `snapshot import` of that tar: the re-imported snapshot has the same root
 * digest (every byte, size, mode and time equal), and GNU tar reads the entry's size (past
 * ustar's 8 GiB − 1 limit: a pax `size` record). Real files on the real disk: it needs about
 * 17 GiB free (the source is removed once imported).
 */
import { strict as assert } from 'node:assert';
import { execFileSync, execSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, statfsSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { awcOk } from '../../helpers/cli.js';

const SIZE = 8 * 1024 ** 3 + 1;
const NEED = 18 * 1024 ** 3;

const work = mkdtempSync(join(tmpdir(), 'awc-large-'));
const st = statfsSync(work);
const free = st.bavail * st.bsize;

describe('a file of 8 GiB + 1 byte', { skip: free < NEED ? `needs ${NEED} bytes free in ${tmpdir()}, has ${free}` : false }, () => {
  after(() => rmSync(work, { recursive: true, force: true }));

  it(
    'round-trips through export --tar and re-import byte for byte (same root digest); GNU tar reads its size',
    { timeout: 20 * 60_000 },
    () => {
      const home = join(work, 'home');
      const src = join(work, 'src');
      mkdirSync(src);
      const file = join(src, 'random.bin');
      // random bytes at disk speed: AES-CTR of zeros under a random key
      execSync(
        `openssl enc -aes-128-ctr -K $(openssl rand -hex 16) -iv $(openssl rand -hex 16) < /dev/zero 2>/dev/null | head -c ${SIZE} > '${file}'`,
        { shell: '/bin/bash' },
      );
      assert.equal(statSync(file).size, SIZE);
      const first = awcOk(home, ['snapshot', 'import', src, '--name', 'big']);
      assert.equal(first.bytes, SIZE);
      rmSync(src, { recursive: true }); // room for the tar
      const tar = join(work, 'big.tar');
      awcOk(home, ['export', 'big', '--tar', tar]);
      const listing = execFileSync('tar', ['-tvf', tar], { encoding: 'utf8' });
      assert.match(listing, new RegExp(`^-rw\\S+ \\d+/\\d+\\s+${SIZE} .* \\./random\\.bin$`, 'm'));
      const again = awcOk(home, ['snapshot', 'import', tar, '--name', 'again']);
      assert.equal(again.bytes, SIZE);
      assert.equal(again.newBytes, 0, 'every chunk was already stored');
      assert.equal(again.root, first.root, 'the re-imported tree equals the original in every byte and attribute');
    },
  );
});
