/**
 * Issue 12, fidelity item 11: a file of 8 GiB + 1 byte round-trips through `export --tar` and
 * `snapshot import` of that tar: the re-imported snapshot has the same root digest (every byte,
 * size, mode and time equal), and GNU tar reads the entry's size (past ustar's 8 GiB − 1 limit:
 * a pax `size` record). Real files on the real disk: it needs about 17 GiB free (the source is
 * removed once imported).
 *
 * The file is one random block of {@link PERIOD} bytes repeated to 8 GiB + 1 byte, not 8 GiB of
 * fresh random bytes: content-defined chunks then repeat, so the store holds one period and the
 * test costs a fraction of the CPU (it was the slowest test of CI, and it starved the one beside
 * it). It proves no less: the period does not divide 2^32 (nor 2^31), so a file offset cut to 32
 * bits anywhere on the way (chunk offsets, the tar writer, the reader) reads other bytes and
 * changes the root digest, and the tail past 8 GiB is checked like every other byte.
 */
import { strict as assert } from 'node:assert';
import { execFileSync, execSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, statfsSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { awcOk } from '../../helpers/cli.js';

const SIZE = 8 * 1024 ** 3 + 1;
/** Bytes of the repeated random block: 64 MiB + 4099 (a prime), so 2^32 is not a multiple of it. */
const PERIOD = 64 * 1024 ** 2 + 4099;
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
      // one random block (AES-CTR of zeros under a random key), repeated to SIZE
      const block = join(work, 'block.bin');
      execSync(
        `openssl enc -aes-128-ctr -K $(openssl rand -hex 16) -iv $(openssl rand -hex 16) < /dev/zero 2>/dev/null | head -c ${PERIOD} > '${block}'`,
        { shell: '/bin/bash' },
      );
      execSync(`while cat '${block}'; do :; done 2>/dev/null | head -c ${SIZE} > '${file}'`, { shell: '/bin/bash' });
      rmSync(block);
      assert.equal(statSync(file).size, SIZE);
      assert.notEqual(2 ** 32 % PERIOD, 0, 'a 32-bit offset wrap would read other bytes');
      const first = awcOk(home, ['snapshot', 'import', src, '--name', 'big']);
      assert.equal(first.bytes, SIZE);
      assert.ok(first.newBytes < 2 * PERIOD, `the repeated block is stored about once (${first.newBytes} new bytes)`);
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
