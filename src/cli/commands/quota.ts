import type { Command } from 'commander';
import type { CliCommand, CliContext } from './command.js';
import { AwcError } from '../../core/errors.js';
import { formatBytes } from '../output/output.js';
import type { NamespaceQuota, QuotaPatch, QuotaUsage } from '../../catalog/port/quotas.js';

/** Options of `awc quota set`: each a limit as given on the command line. */
interface SetOptions {
  stored?: string;
  daily?: string;
  workspaces?: string;
}

/**
 * A limit given on the command line: a non-negative integer (bytes, or a count), or `none`
 * (removes that limit). @throws E_USAGE
 */
export function parseLimit(flag: string, v: string): number | null {
  if (v === 'none') return null;
  if (!/^\d+$/.test(v) || !Number.isSafeInteger(Number(v))) {
    throw new AwcError('E_USAGE', `${flag} takes a non-negative integer (bytes for sizes) or "none", not "${v}"`);
  }
  return Number(v);
}

/** The patch of `awc quota set`'s options. @throws E_USAGE (no option, or a bad value) */
function patchOf(o: SetOptions): QuotaPatch {
  const p: QuotaPatch = {};
  if (o.stored !== undefined) p.storedBytes = parseLimit('--stored', o.stored);
  if (o.daily !== undefined) p.dailyNewBytes = parseLimit('--daily', o.daily);
  if (o.workspaces !== undefined) p.workspaces = parseLimit('--workspaces', o.workspaces);
  if (Object.keys(p).length === 0) throw new AwcError('E_USAGE', 'awc quota set: give at least one of --stored, --daily, --workspaces');
  return p;
}

/** What `awc quota show` prints: the namespace, its limits (null: none) and usage. */
export interface QuotaReport {
  namespace: string;
  quota: NamespaceQuota;
  usage: QuotaUsage;
}

/** The text form of a {@link QuotaReport}: one line per limit, usage against it. */
export function formatQuota(r: QuotaReport): string {
  const lim = (v: number | null, f: (n: number) => string) => (v === null ? 'no limit' : f(v));
  const bytes = (n: number) => `${formatBytes(n)} (${n} bytes)`;
  return [
    `namespace ${r.namespace}`,
    `stored bytes:        ${bytes(r.usage.storedBytes)} of ${lim(r.quota.storedBytes, bytes)}`,
    `new bytes, last 24h: ${bytes(r.usage.dailyNewBytes)} of ${lim(r.quota.dailyNewBytes, bytes)}`,
    `workspaces:          ${r.usage.workspaces} of ${lim(r.quota.workspaces, String)}`,
  ].join('\n');
}

const NONE: NamespaceQuota = { storedBytes: null, dailyNewBytes: null, workspaces: null };

/**
 * Registers `awc quota set|show|clear` (docs/reference/quotas.md): the quotas of the current
 * namespace (`--namespace`), kept in the catalog and checked at each import, checkpoint and fork
 * commit. `set` and `clear` are for root or the home's owner (an ordinary user's CLI refuses
 * them: user-guards.ts); each needs the home itself, not the daemon.
 */
export const command: CliCommand = {
  register(program: Command, { withAwc }: CliContext): void {
    const quota = program.command('quota').description("the current namespace's quotas: stored bytes, new bytes per day, workspaces");
    const report = async (awc: Parameters<Parameters<typeof withAwc>[0]>[0]): Promise<QuotaReport> => {
      const { inProcess } = await import('../remote/through-daemon.js');
      const a = inProcess(awc, 'the catalog');
      return {
        namespace: a.namespace,
        quota: (await a.catalog.quota(a.namespace)) ?? NONE,
        usage: await a.catalog.quotaUsage(a.namespace),
      };
    };
    quota
      .command('set')
      .description('set limits (bytes; "none" removes one); limits not given stay')
      .option('--stored <bytes>', "most bytes of the namespace's packs")
      .option('--daily <bytes>', 'most new bytes its commits add in 24 hours')
      .option('--workspaces <n>', 'most workspaces')
      .action((opts: SetOptions) =>
        withAwc(async (awc, o) => {
          const patch = patchOf(opts);
          const { inProcess } = await import('../remote/through-daemon.js');
          const a = inProcess(awc, 'the catalog');
          await a.catalog.setQuota(a.namespace, patch);
          const r = await report(awc);
          o.result(r, () => formatQuota(r));
        }),
      );
    quota
      .command('show')
      .description('the limits and what the namespace uses now')
      .action(() =>
        withAwc(async (awc, o) => {
          const r = await report(awc);
          o.result(r, () => formatQuota(r));
        }),
      );
    quota
      .command('clear')
      .description("remove the namespace's limits")
      .action(() =>
        withAwc(async (awc, o) => {
          const { inProcess } = await import('../remote/through-daemon.js');
          const a = inProcess(awc, 'the catalog');
          const cleared = await a.catalog.clearQuota(a.namespace);
          o.result({ namespace: a.namespace, cleared }, () =>
            cleared ? `quotas of ${a.namespace} removed` : `${a.namespace} had no quotas`,
          );
        }),
      );
  },
};
