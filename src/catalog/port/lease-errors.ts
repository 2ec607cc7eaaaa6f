import { AwcError } from '../../core/errors.js';
import type { LeaseRow } from './catalog.js';

/** When a lease's holder session expires(d), for messages: ISO time and seconds from now. */
function whenOf(l: LeaseRow): string {
  if (l.expiresAtMs === null) return 'its session has ended';
  const s = Math.round((l.expiresAtMs - l.nowMs) / 100) / 10;
  return `${new Date(l.expiresAtMs).toISOString()} (${s >= 0 ? `in ${s} s` : `${-s} s ago`}, by the catalog's clock)`;
}

/** E_LEASED for workspace `id`, naming the holder and the expiry. */
export function leasedError(id: string, l: LeaseRow): AwcError {
  const details = { workspaceId: id, holder: l.host, epoch: l.epoch, state: l.state, expiresAtMs: l.expiresAtMs };
  if (l.state === 'live')
    return new AwcError('E_LEASED', `workspace ${id} is leased by host ${l.host} (epoch ${l.epoch}) until ${whenOf(l)}`, {
      hint: `Unmount it on ${l.host}, or wait until its lease expires (${l.host}'s daemon stopped renewing it) and take it over with --steal.`,
      details,
    });
  return new AwcError('E_LEASED', `workspace ${id}: the lease of host ${l.host} (epoch ${l.epoch}) expired: ${whenOf(l)}`, {
    hint: `Pass --steal to take it over at its last checkpoint; what ${l.host} did not checkpoint is lost.`,
    details,
  });
}

/** E_LEASE_LOST for workspace `id`: `why`, with the lease as it is now. */
export function leaseLostError(id: string, why: string, now: LeaseRow | undefined): AwcError {
  return new AwcError('E_LEASE_LOST', `workspace ${id}: ${why}`, {
    details: { workspaceId: id, holder: now?.host ?? null, epoch: now?.epoch ?? null, state: now?.state ?? null },
  });
}
