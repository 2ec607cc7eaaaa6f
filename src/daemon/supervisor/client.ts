import { request } from 'node:http';
import type { HostSweepReport } from '../../service/gc/host-sweep.js';
import { spawn } from 'node:child_process';
import { closeSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { AwcError, toAwcError, type ErrorJson } from '../../core/errors.js';
import { mkdirPrivateSync, openPrivateAppendSync } from '../../core/private-fs.js';
import { pathsOf, type AwcConfig } from '../../config/config.js';
import type { CheckpointReport, HostDaemonPort, ImportImageReport } from '../../drivers/port/host-daemon-port.js';
import type { MountResult } from '../../drivers/port/mount-driver.js';
import { livePid } from './pid-file.js';
import { clearStartError, readStartError } from './start-error.js';

/**
 * Client of the host daemon's HTTP API on its Unix socket (JSON bodies; errors as
 * `{error: {code, message, hint, retryable}}`). Starts the daemon on demand. It is the
 * service's HostDaemonPort (the overlay mounts run in the daemon).
 */
export class DaemonClient implements HostDaemonPort {
  private socket: string;

  constructor(private config: AwcConfig) {
    this.socket = pathsOf(config).socket;
  }

  /**
   * Calls the daemon. With `start` (default true) a daemon that is not running is started
   * first and waited for (up to 120 s: it remounts what it had before answering).
   * @throws the daemon's AwcError; E_DAEMON_UNAVAILABLE when it cannot be reached or started
   */
  async call(method: 'GET' | 'POST', path: string, body?: unknown, opts: { start?: boolean; timeoutMs?: number } = {}): Promise<unknown> {
    try {
      return await this.raw(method, path, body, opts.timeoutMs);
    } catch (err) {
      if (!(err instanceof AwcError) || err.code !== 'E_DAEMON_UNAVAILABLE' || opts.start === false) throw err;
    }
    await this.start();
    return this.raw(method, path, body, opts.timeoutMs);
  }

  /** `POST /v1/mount` (see HostDaemonPort.mount); starts the daemon when it is not running. */
  async mount(req: { namespace: string; workspace: string; target: string; steal?: boolean }): Promise<MountResult> {
    return (await this.call('POST', '/v1/mount', req)) as MountResult;
  }

  /** `GET /v1/status`, starting the daemon when it is not running (see HostDaemonPort.ensureRunning). */
  async ensureRunning(): Promise<void> {
    await this.call('GET', '/v1/status');
  }

  /** `POST /v1/unmount` (see HostDaemonPort.unmount). */
  async unmount(req: { namespace: string; workspace: string; force: boolean }): Promise<void> {
    // a daemon that died and that its supervisor is starting again still serves the mount: wait for it
    const supervised = livePid(pathsOf(this.config).supervisorPidFile) !== undefined;
    await this.call('POST', '/v1/unmount', req, { start: supervised });
  }

  /**
   * Best effort: `POST /v1/checkpoint-report {driver, durationMs, newBytes, namespace?, root?}`
   * to a running daemon, for its Prometheus metrics and (with a root) to share the root's layer
   * image in the background. Never starts the daemon, never throws, and waits at most ~1 s.
   */
  reportCheckpoint(body: CheckpointReport): Promise<void> {
    return this.report('/v1/checkpoint-report', body);
  }

  /**
   * Best effort: `POST /v1/image-report {outcome, reason}` to a running daemon, for its
   * `awc_layer_images_total` (an import's layer image). Never starts the daemon, never throws,
   * and waits at most ~1 s.
   */
  reportImportImage(body: ImportImageReport): Promise<void> {
    return this.report('/v1/image-report', body);
  }

  /** Best effort: `POST path body` to a running daemon; never starts it, never throws, waits at most ~1 s. */
  private async report(path: string, body: object): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        // a late rejection after the timer won must not become an unhandled rejection
        this.call('POST', path, body, { start: false, timeoutMs: 1000 }).catch(() => undefined),
        new Promise((r) => (timer = setTimeout(r, 1000)).unref()),
      ]);
    } catch {
      // no daemon, an older daemon, or a slow one: metrics are not worth failing a checkpoint or an import
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * `POST /v1/sweep {dryRun}`: one host-local sweep in the daemon (HostSweepReport). With
   * `start` (default true) a daemon that is not running is started first.
   * @throws the daemon's AwcError; E_DAEMON_UNAVAILABLE (not running and `start` false, or unreachable)
   */
  async sweep(opts: { dryRun?: boolean; start?: boolean } = {}): Promise<HostSweepReport> {
    return (await this.call('POST', '/v1/sweep', { dryRun: opts.dryRun === true }, { start: opts.start ?? true })) as HostSweepReport;
  }

  /** True when the daemon answers on its socket. */
  async running(): Promise<boolean> {
    try {
      await this.raw('GET', '/v1/status', undefined, 2000);
      return true;
    } catch {
      return false;
    }
  }

  /**
   * Starts the daemon under its supervisor (supervisor-main.js, what `awc daemon run` runs),
   * detached (log in `<home>/host/awcd.log`, 0600), and waits until it answers.
   * @throws the error the daemon's start failed with, when it recorded one (src/daemon/supervisor/start-error.ts: e.g.
   *   E_CONFIG naming `fdReserve`, E_STORE_MISMATCH), else E_DAEMON_UNAVAILABLE
   */
  async start(): Promise<void> {
    const paths = pathsOf(this.config);
    const deadline = Date.now() + 120_000;
    // a live supervisor is already starting a daemon (one that died): wait for it, never start a second one
    while (livePid(paths.supervisorPidFile) !== undefined && Date.now() < deadline) {
      if (await this.running()) return;
      await new Promise((r) => setTimeout(r, 100));
    }
    let log: number;
    try {
      mkdirPrivateSync(paths.hostDir);
      log = openPrivateAppendSync(paths.logFile);
    } catch (err) {
      throw toAwcError(err);
    }
    clearStartError(paths.hostDir);
    const main = fileURLToPath(new URL('./supervisor-main.js', import.meta.url));
    const child = spawn(process.execPath, [main, '--home', this.config.home], {
      detached: true,
      stdio: ['ignore', log, log],
      env: { ...process.env, AWC_HOME: this.config.home, AWC_NAMESPACE: this.config.namespace },
    });
    child.unref();
    closeSync(log);
    let exited: number | null = null;
    child.on('exit', (code) => (exited = code ?? -1));
    while (Date.now() < deadline) {
      if (await this.running()) return;
      // ours gave up, and no other supervisor (one that started at the same time) is starting a daemon
      if (exited !== null && livePid(paths.supervisorPidFile) === undefined) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    // a start that failed for a known reason (a bad configuration, a catalog and store that do not match): that error
    throw (
      readStartError(paths.hostDir, paths.logFile) ??
      new AwcError('E_DAEMON_UNAVAILABLE', `the host daemon did not start (see ${paths.logFile})`)
    );
  }

  private raw(method: string, path: string, body: unknown, timeoutMs = 600_000): Promise<unknown> {
    return new Promise((resolve, reject) => {
      const data = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
      const req = request(
        {
          socketPath: this.socket,
          method,
          path,
          headers: data ? { 'content-type': 'application/json', 'content-length': data.length } : {},
          timeout: timeoutMs,
        },
        (res) => {
          const parts: Buffer[] = [];
          res.on('data', (d) => parts.push(d));
          res.on('end', () => {
            const text = Buffer.concat(parts).toString('utf8');
            if (path === '/metrics' && res.statusCode === 200) {
              resolve(text);
              return;
            }
            let json: { error?: ErrorJson } & Record<string, unknown>;
            try {
              json = text === '' ? {} : JSON.parse(text);
            } catch {
              reject(new AwcError('E_INTERNAL', `daemon sent a non-JSON answer: ${text.slice(0, 200)}`));
              return;
            }
            if (res.statusCode && res.statusCode >= 400) reject(AwcError.fromJSON(json.error ?? {}));
            else resolve(json);
          });
        },
      );
      req.on('timeout', () => req.destroy(new Error('timeout')));
      req.on('error', (err: NodeJS.ErrnoException) => {
        if (err.code === 'ENOENT' || err.code === 'ECONNREFUSED')
          reject(new AwcError('E_DAEMON_UNAVAILABLE', `the host daemon is not running (${this.socket})`));
        else reject(new AwcError('E_DAEMON_UNAVAILABLE', `the host daemon did not answer: ${err.message}`));
      });
      if (data) req.write(data);
      req.end();
    });
  }
}
