/**
 * The copy adapter (src/drivers/copy/copy-mount-driver.ts) runs the MountDriver contract:
 * real materialisation, and (as root) a real nosuid,nodev bind mount.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CopyMountDriver } from '../../../src/drivers/copy/copy-mount-driver.js';
import { Awc } from '../../../src/service/workspace/awc.js';
import { mountDriverContract } from '../../contracts/mount-driver.contract.js';
import { cleanupMounts } from '../../helpers/cli.js';

mountDriverContract(
  'CopyMountDriver',
  async () => {
    const work = mkdtempSync(join(tmpdir(), 'awc-copy-contract-'));
    const home = join(work, 'home');
    const awc = await Awc.open({ home, mountDriver: 'copy' });
    return {
      driver: new CopyMountDriver(awc),
      awc,
      work,
      keepsChanges: false,
      outlivesForcedUnmount: false,
      // a lost bind mount is bound again only where there is a private tree (as root)
      resumesLostMount: process.getuid?.() === 0,
      close: async () => {
        await awc.close();
        cleanupMounts(home, work);
        rmSync(work, { recursive: true, force: true });
      },
    };
  },
  process.getuid?.() === 0 ? false : 'needs root (a bind mount, and a busy mount to unmount)',
);
