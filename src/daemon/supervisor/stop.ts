import { existsSync, lstatSync, readdirSync, rmdirSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { openCatalog } from '../../catalog/open/open-catalog.js';
import { parseCatalogUrl } from '../../config/backend-url.js';
import { cleanLeftovers, findLeftovers, type CleanedMount } from '../../drivers/overlay/leftovers.js';
import { pathsOf, type AwcConfig, type AwcPaths } from '../../config/config.js';
import { DaemonClient } from './client.js';
import { livePid } from './pid-file.js';
import { cliSocketOf } from '../warm/warm-protocol.js';

/** Result of {@link stopDaemon}. */
export interface StopResult {
  running: false;
  /** True when a running daemon was asked to stop and did. */
  stopped: boolean;
  /** Mounts a dead daemon had left and that were unmounted (`lazy`: only detached, still in use). */
  cleaned: CleanedMount[];
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Waits until `done()` or `ms` passed; returns done(). */
async function waitFor(done: () => boolean | Promise<boolean>, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await done()) return true;
    await sleep(100);
  }
  return done();
}

/** SIGTERM, then SIGKILL after `ms`, to a pid from a pid file; waits until it is gone (at most 2 × ms). */
async function terminate(pidFile: string, ms: number): Promise<void> {
  const pid = livePid(pidFile);
  if (pid === undefined) return;
  try {
    process.kill(pid, 'SIGTERM');
  } catch {
    return;
  }
  if (await waitFor(() => livePid(pidFile) !== pid, ms)) return;
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    /* gone */
  }
  await waitFor(() => livePid(pidFile) !== pid, ms);
}

/**
 * Stops the host daemon of a home and cleans what a dead one left:
 *
 * - daemon answering: asked to stop (it unmounts everything, keeping uncheckpointed changes),
 *   waited for (60 s), supervisor included;
 * - supervisor alive but daemon not answering (it died and is being started again): waited
 *   for up to 30 s, then stopped as above; if it never answers, the supervisor and the daemon
 *   are terminated (SIGTERM, SIGKILL after 10 s);
 * - then, with no daemon left, the mounts it left ({@link findLeftovers}: overlays on this
 *   home's uppers, the dead content FUSE) are unmounted (lazily when busy, and said so), the
 *   catalog's overlay mount records of this host are cleared (the uppers stay: the next mount
 *   resumes them), and the content connection's session file and the daemon's sockets (API,
 *   warm CLI, the per-user ones and their directory) are removed.
 * @throws E_TARGET_BUSY (a mount in use, without force), E_DAEMON_UNAVAILABLE
 */
export async function stopDaemon(config: AwcConfig, force: boolean): Promise<StopResult> {
  const paths = pathsOf(config);
  const client = new DaemonClient(config);
  let running = await client.running();
  if (!running && livePid(paths.supervisorPidFile) !== undefined) running = await waitFor(() => client.running(), 30_000);
  let stopped = false;
  if (running) {
    await client.call('POST', '/v1/stop', { force }, { start: false });
    // wait until the processes have exited (the daemon unmounts after it stops answering)
    await waitFor(
      async () => !(await client.running()) && livePid(paths.pidFile) === undefined && livePid(paths.supervisorPidFile) === undefined,
      60_000,
    );
    stopped = true;
  }
  await terminate(paths.supervisorPidFile, 10_000);
  await terminate(paths.pidFile, 10_000);
  return { running: false, stopped, cleaned: await cleanDeadDaemon(config) };
}

/**
 * With no daemon or supervisor alive for this home: unmounts what a dead daemon left, clears
 * this host's overlay mount records and the content session file (see {@link stopDaemon}).
 * Returns what was unmounted; [] (and touches nothing) while a daemon or supervisor lives.
 */
export async function cleanDeadDaemon(config: AwcConfig): Promise<CleanedMount[]> {
  const paths = pathsOf(config);
  if (livePid(paths.pidFile) !== undefined || livePid(paths.supervisorPidFile) !== undefined || (await new DaemonClient(config).running()))
    return [];
  const cleaned = await cleanLeftovers(findLeftovers(paths));
  // an embedded catalog that was never created (or is empty: lost, never to be re-created) has no mount records to clear
  if (parseCatalogUrl(config.catalog).kind !== 'sqlite' || (existsSync(paths.catalog) && statSync(paths.catalog).size > 0)) {
    const catalog = await openCatalog(config.catalog);
    try {
      for (const ws of await catalog.listMountedOnHost(config.host)) if (ws.mountDriver === 'overlay') await catalog.setMount(ws.id, null);
    } finally {
      await catalog.close();
    }
  }
  rmSync(paths.fuseSession, { force: true });
  removeSockets(paths);
  return cleaned;
}

/**
 * Removes the socket files a daemon of this home left (a killed one cannot): its API socket,
 * its warm CLI socket, and in its per-user socket directory every socket (`<uid>.sock`,
 * `<uid>.cli.sock`), then that directory once empty. Only sockets are removed, never through a
 * symlink (lstat), and the directory only when it is a real one owned by this process's user.
 * Never throws (what cannot be removed stays; the next daemon replaces a stale socket).
 */
function removeSockets(paths: AwcPaths): void {
  const isSocket = (p: string): boolean => lstatSync(p, { throwIfNoEntry: false })?.isSocket() === true;
  try {
    for (const p of [paths.socket, cliSocketOf(paths.socket)]) if (isSocket(p)) rmSync(p, { force: true });
    const dir = lstatSync(paths.userSockets, { throwIfNoEntry: false });
    if (!dir?.isDirectory() || dir.uid !== process.getuid?.()) return;
    for (const name of readdirSync(paths.userSockets)) {
      const p = join(paths.userSockets, name);
      if (/^\d+(\.cli)?\.sock$/.test(name) && isSocket(p)) rmSync(p, { force: true });
    }
    rmdirSync(paths.userSockets);
  } catch {
    // not empty, or not ours to remove: left as it is
  }
}
