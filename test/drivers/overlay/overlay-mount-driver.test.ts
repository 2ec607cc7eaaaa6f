/**
 * The overlay adapter (src/drivers/overlay/overlay-mount-driver.ts) runs the MountDriver
 * contract: real overlayfs mounts made by a real host daemon (started on demand by the
 * daemon client, its HostDaemonPort) over its content FUSE server.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DaemonClient } from '../../../src/daemon/supervisor/client.js';
import { detectDriver } from '../../../src/drivers/detect/detect-driver.js';
import { OverlayMountDriver } from '../../../src/drivers/overlay/overlay-mount-driver.js';
import { Awc } from '../../../src/service/workspace/awc.js';
import { mountDriverContract } from '../../contracts/mount-driver.contract.js';
import { cleanupMounts } from '../../helpers/cli.js';

const report = detectDriver('auto');

mountDriverContract(
  'OverlayMountDriver',
  async () => {
    const work = mkdtempSync(join(tmpdir(), 'awc-overlay-contract-'));
    const home = join(work, 'home');
    const awc = await Awc.open({ home, mountDriver: 'overlay' });
    return {
      driver: new OverlayMountDriver(awc, new DaemonClient(awc.config)),
      awc,
      work,
      keepsChanges: true,
      outlivesForcedUnmount: true,
      resumesLostMount: false,
      close: async () => {
        await awc.close();
        cleanupMounts(home, work);
        rmSync(work, { recursive: true, force: true });
      },
    };
  },
  report.driver === 'overlay' ? false : `overlay not available: ${report.reason}`,
);
