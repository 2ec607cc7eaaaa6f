import { AwcError } from '../../core/errors.js';
import { describeMountHolders, type MountHolder } from '../../host/mount/mount-holders.js';

/** A process that keeps a mount alive: pid, command name, and what it holds (src/host/mount/mount-holders.ts). */
export type Holder = MountHolder;

/** Whether an earlier mount still uses a workspace's private changes (see {@link MountDriver.inUse}). */
export interface MountUse {
  /** True when a mount still uses them (the kernel's answer), or a holder was found. */
  inUse: boolean;
  /** Processes holding it (empty when none could be seen, e.g. in another PID namespace). */
  holders: Holder[];
  /** Where such a mount is still mounted in this process's mount namespace. */
  mountedAt: string[];
}

/** The answer for private changes no mount uses (a copy, or an overlay whose upper is gone). */
export const NOT_IN_USE: MountUse = Object.freeze({ inUse: false, holders: [], mountedAt: [] });

/** Why a workspace's private changes count as in use, for an E_STILL_MOUNTED message. */
export function describeUse(use: MountUse): string {
  const parts: string[] = [];
  if (use.mountedAt.length > 0) parts.push(`mounted at ${use.mountedAt.join(', ')}`);
  if (use.holders.length > 0) parts.push(`held by ${describeHolders(use.holders)}`);
  if (parts.length === 0) parts.push('held by no process visible here (another PID namespace, or a mount namespace without processes)');
  return parts.join('; ');
}

/** "pid 123 (sh, fd 3), pid 456 (bash, cwd)" for messages; at most `max` named. */
export function describeHolders(holders: Holder[], max = 5): string {
  return describeMountHolders(holders, max);
}

/**
 * Refuses while an earlier mount still uses a workspace's private changes (the driver's
 * {@link MountDriver.inUse} answer).
 * @throws E_STILL_MOUNTED `workspace <id>: <what> while an earlier mount is alive (…)`, `details.holders`
 */
export async function refuseWhileUsed<S extends { workspaceId: string }>(
  driver: { inUse(state: S): Promise<MountUse> },
  state: S,
  what: string,
): Promise<void> {
  const use = await driver.inUse(state);
  if (use.inUse)
    throw new AwcError('E_STILL_MOUNTED', `workspace ${state.workspaceId}: ${what} while an earlier mount is alive (${describeUse(use)})`, {
      details: { holders: use.holders },
    });
}
