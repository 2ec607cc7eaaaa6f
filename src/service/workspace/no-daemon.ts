import { AwcError } from '../../core/errors.js';
import type { HostDaemonPort } from '../../drivers/port/host-daemon-port.js';

/** The port when no host daemon was wired in (see Awc.open): overlay mounts fail, checkpoints report nothing. */
export const NO_DAEMON: HostDaemonPort = {
  mount: () => Promise.reject(new AwcError('E_INTERNAL', 'no host daemon port was given to Awc.open, so overlay mounts are not possible')),
  unmount: () =>
    Promise.reject(new AwcError('E_INTERNAL', 'no host daemon port was given to Awc.open, so overlay unmounts are not possible')),
  reportCheckpoint: async () => undefined,
  reportImportImage: async () => undefined,
  ensureRunning: async () => undefined,
};
