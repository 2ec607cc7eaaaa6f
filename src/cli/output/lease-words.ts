import type { LeaseView } from '../../service/workspace/lease-guard.js';

/**
 * A lease view in words for `awc ls` and `awc show` (text output), starting with two spaces;
 * empty for a workspace that was never leased.
 */
export function leaseWords(l: LeaseView): string {
  if (l.state === 'none') return '';
  const who =
    l.here === 'held'
      ? `leased here (epoch ${l.epoch})`
      : l.here === 'lost'
        ? `LEASE LOST (epoch ${l.epoch}${l.holder ? `, ${l.state === 'live' ? 'held' : 'last held'} by ${l.holder}` : ''})`
        : l.here === 'elsewhere'
          ? `leased by ${l.holder} (epoch ${l.epoch}, ${l.state}${l.expiresAt ? ` until ${l.expiresAt}` : ''})`
          : `lease free (epoch ${l.epoch})`;
  return `  ${who}${l.note ? `: ${l.note}` : ''}`;
}
