import { resolve } from 'node:path';
import { AwcError } from '../../core/errors.js';
import type { WorkspaceRow } from '../../catalog/port/catalog.js';
import { readHostState, type WorkspaceHostState } from '../../drivers/port/workspace-state.js';
import type { Awc } from '../../service/workspace/awc.js';
import type { AllowedUser } from './user-access.js';

/**
 * The mounter rule (docs/explanation/security.md "Live state belongs to its mounter"): a
 * workspace's state on this host (its upper, its copy tree, its uncheckpointed changes) is
 * its mounter's. An ordinary user may act on it or read it only when they mounted it; a state
 * root mounted (no `owner`) is root's. No host state here: there is nothing live to protect.
 */
export function ownsLiveState(user: Pick<AllowedUser, 'uid'>, state: WorkspaceHostState | undefined): boolean {
  return state === undefined || state.owner?.uid === user.uid;
}

/**
 * The workspace `ref` names, by mount path (with a `/` in it, Awc.unmount's rule) or by id
 * or name; undefined when it names a snapshot. Fails closed: a lookup that fails throws its
 * error (E_NOT_FOUND, E_AMBIGUOUS, …), it never lets the call through unchecked.
 */
async function workspaceOf(awc: Awc, ref: string): Promise<WorkspaceRow | undefined> {
  if (ref.includes('/')) {
    const ws = await awc.catalog.findWorkspaceByMountPath(resolve(ref));
    if (ws) return ws;
  }
  const r = await awc.resolve(ref);
  return r.kind === 'workspace' ? r.workspace : undefined;
}

/**
 * Refuses `user` a workspace whose state on this host another user (or root) holds: every
 * call that acts on a workspace's live state (mount, checkpoint, unmount, rm, run) or reads
 * it (diff, show, export, usage) goes through this one check.
 * @throws E_PERMISSION (another's live state), what the lookup throws (E_NOT_FOUND, E_AMBIGUOUS)
 */
export async function checkMounter(user: AllowedUser, awc: Awc, workspacesDir: string, ref: string): Promise<void> {
  const ws = await workspaceOf(awc, ref);
  if (!ws) return; // a snapshot: immutable, nobody's live state
  const state = await readHostState(workspacesDir, ws.id);
  if (ownsLiveState(user, state)) return;
  throw new AwcError(
    'E_PERMISSION',
    `workspace ${ws.id} was mounted on this host by ${state?.owner ? `uid ${state.owner.uid}` : 'root'}, not by ${user.name}`,
    {
      hint: 'Only the user who mounted a workspace (or root) may checkpoint, unmount, remove, diff, show or export it while it has state on this host.',
    },
  );
}
