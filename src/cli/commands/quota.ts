import { Option, type Command } from 'commander';
import type { CliCommand, CliContext } from './command.js';
import { AwcError } from '../../core/errors.js';
import { parseSize } from '../../core/size.js';
import { textTable } from '../../core/text-table.js';
import { formatBytes } from '../output/output.js';
import type { Awc } from '../../service/workspace/awc.js';
import type { OpenedAwc } from '../remote/through-daemon.js';
import type { NamespaceQuota, QuotaPatch, QuotaUsage } from '../../catalog/port/quotas.js';

/** Options of `awc quota set`: each a limit as given on the command line (`--stored`/`--daily`: the older, hidden names). */
interface SetOptions {
  storedBytes?: string;
  dailyNewBytes?: string;
  workspaces?: string;
  stored?: string;
  daily?: string;
}

/**
 * A size limit given on the command line (`--stored-bytes`, `--daily-new-bytes`): bytes, or a
 * number and a binary unit (`10G` = 10 × 2^30; src/core/size.ts), or `none` (removes that
 * limit). @throws E_USAGE
 */
export function parseSizeLimit(flag: string, v: string): number | null {
  return v === 'none' ? null : parseSize(v, flag);
}

/** A count limit given on the command line (`--workspaces`): a non-negative integer, or `none`. @throws E_USAGE */
export function parseCountLimit(flag: string, v: string): number | null {
  if (v === 'none') return null;
  if (!/^\d+$/.test(v) || !Number.isSafeInteger(Number(v))) {
    throw new AwcError('E_USAGE', `${flag} takes a non-negative integer or "none", not "${v}"`);
  }
  return Number(v);
}

/** The patch of `awc quota set`'s options. @throws E_USAGE (no option, or a bad value) */
function patchOf(o: SetOptions): QuotaPatch {
  const p: QuotaPatch = {};
  const stored = o.storedBytes ?? o.stored;
  const daily = o.dailyNewBytes ?? o.daily;
  if (stored !== undefined) p.storedBytes = parseSizeLimit('--stored-bytes', stored);
  if (daily !== undefined) p.dailyNewBytes = parseSizeLimit('--daily-new-bytes', daily);
  if (o.workspaces !== undefined) p.workspaces = parseCountLimit('--workspaces', o.workspaces);
  if (Object.keys(p).length === 0) {
    throw new AwcError('E_USAGE', 'awc quota set: give at least one of --stored-bytes, --daily-new-bytes, --workspaces');
  }
  return p;
}

/** What `awc quota show` (and `set`) prints: the namespace, its limits (null: none) and what it uses now. */
export interface QuotaReport {
  namespace: string;
  quota: NamespaceQuota;
  usage: QuotaUsage;
}

/**
 * The text form of a {@link QuotaReport}: a table with one row per limit, the usage beside the
 * limit and what is left (sizes in binary units; exact bytes are in `--json`).
 */
export function formatQuota(r: QuotaReport): string {
  const row = (what: string, used: number, limit: number | null, f: (n: number) => string) => [
    what,
    f(used),
    limit === null ? 'none' : f(limit),
    limit === null ? '-' : used > limit ? `over by ${f(used - limit)}` : f(limit - used),
  ];
  const rows = [
    row('stored bytes', r.usage.storedBytes, r.quota.storedBytes, formatBytes),
    row('new bytes, last 24 h', r.usage.dailyNewBytes, r.quota.dailyNewBytes, formatBytes),
    row('workspaces', r.usage.workspaces, r.quota.workspaces, String),
  ];
  return `namespace ${r.namespace}\n${textTable(['', 'used', 'limit', 'left'], rows, [false, true, true, true])}`;
}

const NONE: NamespaceQuota = { storedBytes: null, dailyNewBytes: null, workspaces: null };

/** The catalog of the home itself and the namespace a quota command acts on (`ns`, else the current one). */
async function target(awc: OpenedAwc, ns: string | undefined): Promise<{ a: Awc; ns: string }> {
  const { inProcess } = await import('../remote/through-daemon.js');
  const a = inProcess(awc, 'the catalog');
  return { a, ns: ns ?? a.namespace };
}

/** The limits and usage of `ns`. */
async function reportOf(a: Awc, ns: string): Promise<QuotaReport> {
  return { namespace: ns, quota: (await a.catalog.quota(ns)) ?? NONE, usage: await a.catalog.quotaUsage(ns) };
}

/** Registers `awc quota set`. */
function registerSet(quota: Command, { withAwc }: CliContext): void {
  quota
    .command('set [namespace]')
    .description('set limits of a namespace (default: the current one); limits not given stay, "none" removes one')
    .option('--stored-bytes <size>', "most bytes of the namespace's packs (10G, 512M, bytes, none)")
    .option('--daily-new-bytes <size>', 'most new pack bytes its commits add in 24 hours (10G, 512M, bytes, none)')
    .option('--workspaces <n>', 'most workspaces (none: no limit)')
    .addOption(new Option('--stored <size>').hideHelp())
    .addOption(new Option('--daily <size>').hideHelp())
    .action((ns: string | undefined, opts: SetOptions) =>
      withAwc(async (awc, o) => {
        const patch = patchOf(opts);
        const t = await target(awc, ns);
        await t.a.catalog.setQuota(t.ns, patch);
        const r = await reportOf(t.a, t.ns);
        o.result(r, () => formatQuota(r));
      }),
    );
}

/**
 * Registers `awc quota set|show|unset` (docs/reference/quotas.md): the quotas of a namespace
 * (the argument, else the current one: `--namespace`), kept in the catalog and checked at each
 * import, checkpoint and fork commit (E_QUOTA). `set` and `unset` (alias `clear`) are for root
 * or the home's owner (an ordinary user's CLI refuses them: user-guards.ts); each needs the
 * home itself, not the daemon. Errors: E_USAGE (a bad size or count, no limit given).
 */
export const command: CliCommand = {
  register(program: Command, ctx: CliContext): void {
    const { withAwc } = ctx;
    const quota = program.command('quota').description("a namespace's quotas: stored bytes, new bytes per day, workspaces");
    registerSet(quota, ctx);
    quota
      .command('show [namespace]')
      .description('the limits of a namespace (default: the current one) and what it uses now')
      .action((ns: string | undefined) =>
        withAwc(async (awc, o) => {
          const t = await target(awc, ns);
          const r = await reportOf(t.a, t.ns);
          o.result(r, () => formatQuota(r));
        }),
      );
    quota
      .command('unset [namespace]')
      .alias('clear')
      .description('remove every limit of a namespace (default: the current one)')
      .action((ns: string | undefined) =>
        withAwc(async (awc, o) => {
          const t = await target(awc, ns);
          const cleared = await t.a.catalog.clearQuota(t.ns);
          o.result({ namespace: t.ns, cleared }, () => (cleared ? `quotas of ${t.ns} removed` : `${t.ns} had no quotas`));
        }),
      );
  },
};
