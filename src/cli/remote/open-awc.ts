import type { AwcConfig } from '../../config/config.js';
import { DaemonClient } from '../../daemon/supervisor/client.js';
import { Awc } from '../../service/workspace/awc.js';

/** How a CLI command opens the home (see Awc.open: `create`, `adopting`, `checking`). */
export type OpenMode = { create?: boolean; adopting?: boolean; checking?: boolean };

/**
 * Opens the service as the CLI uses it: with the daemon client as its HostDaemonPort (the
 * overlay mounts run in the host daemon, started on demand). See Awc.open.
 * @throws what Awc.open throws
 */
export function openAwc(overrides: Partial<AwcConfig> = {}, opts: OpenMode = {}): Promise<Awc> {
  return Awc.open(overrides, { ...opts, daemon: (config) => new DaemonClient(config) });
}
