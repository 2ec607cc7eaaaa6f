import { realpathSync } from 'node:fs';
import { resolve } from 'node:path';
import type { Command } from 'commander';
import type { OpenedAwc } from '../remote/through-daemon.js';
import { throughDaemon } from '../remote/through-daemon.js';

/** A word for a POSIX shell: as is when it is plain, else single-quoted. */
export function shellWord(s: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(s) ? s : `'${s.replaceAll("'", `'\\''`)}'`;
}

/**
 * The words that run this same AWC from any shell, whatever its PATH and environment: node
 * and this CLI's script by real path, then `--home <home>` and `--namespace <the opened namespace>`. The home
 * is the opened one (an Awc in process); an ordinary user's client of the root daemon names
 * it only when one was given (`--home`, `AWC_HOME`): without one it finds the default
 * home's socket as this run did. Machine-specific: for machine-local files only (Claude
 * Code's settings.local.json, `.awc/awc`), never for a file the project commits.
 * `awc` replaces node and the script (`init <tool> --awc <command>`), as it is.
 */
export function selfInvocation(program: Command, opened: OpenedAwc, awc?: string): string[] {
  const given = program.opts<{ home?: string }>().home ?? process.env.AWC_HOME;
  const home = !throughDaemon(opened) ? opened.config.home : given === undefined ? undefined : resolve(given);
  const run = awc !== undefined ? [awc] : [shellWord(process.execPath), shellWord(realpathSync(process.argv[1]!))];
  return [...run, ...(home === undefined ? [] : ['--home', shellWord(home)]), '--namespace', shellWord(opened.namespace)];
}
