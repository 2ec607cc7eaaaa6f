import { EventEmitter } from 'node:events';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { openCatalog } from '../src/catalog/open/open-catalog.js';
import type { Catalog } from '../src/catalog/port/catalog.js';
import { openAwc } from '../src/cli/remote/open-awc.js';
import { pathsOf, type AwcConfig } from '../src/config/config.js';
import { AwcError } from '../src/core/errors.js';
import type { Awc } from '../src/service/workspace/awc.js';
import { workspaceDirs } from '../src/drivers/port/workspace-state.js';
import { errorOf, type CliResult } from '../test/helpers/cli.js';
import { mountsUnder, signal as sendSignal, stopTestHost, testHost, waitFor, type TestHost } from '../test/helpers/two-hosts.js';

/** One step's outcome. `ms`: its wall time; `facts`: what it saw, for a test to assert beyond `ok`. */
export interface SmokeStep {
  step: string;
  ok: boolean;
  /** One line: what happened (on failure: what was wrong). */
  detail: string;
  ms: number;
  facts: Record<string, string | number | boolean | string[]>;
}

/** The events of a smoke run: each step as it ends, and the clean-up's problems (never thrown). */
export interface FleetSmokeEvents {
  step: [SmokeStep];
  cleanup: [string];
}

/** What the smoke needs: the shared catalog and bucket, a scratch directory, and the lease timing. */
export interface FleetSmokeOptions {
  /** Catalog URL of an empty database (`postgres://…`; `sqlite:…` works too). */
  catalog: string;
  /** Object store URL of an empty bucket (`s3://bucket/prefix?endpoint=…`; `file:…` works too). */
  objectStore: string;
  /**
   * Extra environment of every CLI call and daemon (S3 credentials as AWS_* variables). The
   * bulk operations run in this process, through the service the CLI uses: its own
   * environment must hold the same credentials.
   */
  env: NodeJS.ProcessEnv;
  /** Scratch directory (homes, the source, mount targets); it and everything mounted under it are removed at the end. */
  workDir: string;
  /** Lease TTL in ms of both hosts (default 3000, so that expiry comes quickly); heartbeat every ttl/6. */
  leaseTtlMs?: number;
  /** Workspaces forked (default 20; an even number), half mounted on each host. */
  workspaces?: number;
  /** Stops the run between CLI calls (the step fails with "interrupted"); the clean-up still runs. */
  signal?: AbortSignal;
}

/** Files each workspace is edited with (under the source's `pkg/lib/`), and the file only host A writes after its checkpoint. */
const EDITED = 'pkg/lib/m0.js';
const DELETED = 'pkg/lib/m1.js';
const UNCHECKPOINTED = 'not-checkpointed.txt';
/** How many mounts, checkpoints or take-overs run at once on a host. */
const PARALLEL = 4;

/**
 * The local fleet smoke (issue 9 item 7; docs/how-to/deploy-a-fleet.md does it by hand): two
 * hosts on one machine (two homes, two host ids, two daemons, two sockets) share one catalog
 * and one bucket, driven through the real CLI. Import on A, fork 20, mount 10 on A and 10 on B,
 * edit and checkpoint on both, B refused while A lives, SIGKILL of A's daemon and supervisor,
 * A's leases expire by the database's clock, B takes A's workspaces over with `--steal` at their
 * last checkpoints (contents checked, `show` names the lost host), and A's late checkpoints are
 * refused (E_LEASE_LOST) with and without a new daemon; B then goes on from A's checkpoint.
 *
 * `run()` returns every step (it stops at the first failed one) and emits each as `step`;
 * it never prints and never throws for a failed step. Run by `npm run smoke:fleet`
 * (smoke/fleet.ts, which starts the services and prints) and test/e2e/fleet-smoke.test.ts.
 */
export class FleetSmoke extends EventEmitter<FleetSmokeEvents> {
  private readonly steps: SmokeStep[] = [];
  private readonly ttl: number;
  private readonly count: number;
  private readonly a: TestHost;
  private readonly b: TestHost;
  /** Each host's settings, as its `<home>/config.json`. */
  private readonly config = new Map<TestHost, Partial<AwcConfig>>();
  /** Each host's service in this process (the CLI's `openAwc`: the daemon client as its daemon port). */
  private readonly lib = new Map<TestHost, Awc>();
  private catalog: Catalog | undefined;
  private ids: string[] = [];
  /** Workspace id → the checkpoint id its host committed and the contents of the edited files. */
  private readonly committed = new Map<string, { id: string; host: string; body: string }>();

  /** Makes the work directory (0700); nothing else happens before `run()`. @throws RangeError for an odd or too small `workspaces` */
  constructor(private readonly opts: FleetSmokeOptions) {
    super();
    this.ttl = opts.leaseTtlMs ?? 3000;
    this.count = opts.workspaces ?? 20;
    if (!Number.isInteger(this.count) || this.count < 2 || this.count % 2 !== 0)
      throw new RangeError(`workspaces must be an even number of at least 2, got ${this.count}`);
    mkdirSync(opts.workDir, { recursive: true, mode: 0o700 }); // (before the hosts' directories in it)
    const host = (id: string): TestHost => {
      const config = {
        catalog: opts.catalog,
        objectStore: opts.objectStore,
        host: id,
        leaseTtlMs: this.ttl,
        heartbeatMs: Math.max(100, Math.floor(this.ttl / 6)),
      };
      const env = {
        ...opts.env,
        AWC_CATALOG: config.catalog,
        AWC_OBJECT_STORE: config.objectStore,
        AWC_HOST: id,
        AWC_LEASE_TTL_MS: String(config.leaseTtlMs),
        AWC_HEARTBEAT_MS: String(config.heartbeatMs),
      };
      const h = testHost(join(opts.workDir, id), id, env);
      this.config.set(h, config);
      return h;
    };
    this.a = host('smoke-a');
    this.b = host('smoke-b');
  }

  /** Walks every step, then cleans up (daemons, mounts, the work directory). @returns the steps, the last one the first that failed */
  async run(): Promise<SmokeStep[]> {
    try {
      for (const [name, fn] of this.walk()) if (!(await this.step(name, fn))) break;
    } finally {
      await this.cleanup();
    }
    return this.steps;
  }

  private walk(): [string, () => Promise<[string, SmokeStep['facts']?]>][] {
    const { a, b } = this;
    const half = this.count / 2;
    const onA = () => this.ids.slice(0, half);
    const onB = () => this.ids.slice(half);
    const mnt = (h: TestHost, ws: string) => join(h.mnt, ws);
    return [
      [
        'start the host daemons of A and B',
        async () => {
          this.catalog = await openCatalog(this.opts.catalog); // (migrates the fresh database once)
          for (const h of [a, b]) {
            // as on a real host (docs/how-to/deploy-a-fleet.md): a daemon started on demand reads it too
            mkdirSync(h.home, { recursive: true, mode: 0o700 });
            writeFileSync(join(h.home, 'config.json'), JSON.stringify(this.config.get(h)), { mode: 0o600 });
          }
          await Promise.all([a, b].map((h) => this.ok(h, ['daemon', 'start'])));
          for (const h of [a, b]) this.lib.set(h, await openAwc({ home: h.home, ...this.config.get(h) }));
          const hosts = await Promise.all([a, b].map((h) => this.catalog!.getHost(h.id)));
          if (!hosts.every((h) => h?.live)) throw new Error('a host has no live session in the catalog');
          return [`${a.id} and ${b.id} registered live sessions`, { sockets: [a, b].map((h) => pathsOf({ home: h.home }).socket) }];
        },
      ],
      [
        'import on host A',
        async () => {
          const src = join(this.opts.workDir, 'source');
          mkdirSync(join(src, 'pkg', 'lib'), { recursive: true });
          for (let i = 0; i < 200; i++) writeFileSync(join(src, 'pkg', 'lib', `m${i}.js`), `module.exports = ${i};\n`.repeat(50));
          writeFileSync(join(src, 'README.md'), '# fleet smoke\n');
          const r = await this.ok(a, ['snapshot', 'import', src, '--name', 'base']);
          return [`snapshot ${r.id}: ${r.files} files into the shared catalog and bucket`, { files: r.files }];
        },
      ],
      [
        `fork ${this.count}`,
        async () => {
          const r = await this.ok(a, ['fork', 'base', '--count', String(this.count), '--name', 'agent']);
          this.ids = r.workspaces.map((w: { id: string }) => w.id);
          if (this.ids.length !== this.count) throw new Error(`forked ${this.ids.length}`);
          return [`${this.ids.length} workspaces (agent-1 … agent-${this.count})`, { workspaces: this.ids.length }];
        },
      ],
      [
        `mount ${half} on A and ${half} on B`,
        async () => {
          await Promise.all([
            this.each(onA(), (ws) => this.awc(a).mount(ws, mnt(a, ws))),
            this.each(onB(), (ws) => this.awc(b).mount(ws, mnt(b, ws))),
          ]);
          for (const [h, list] of [
            [a, onA()],
            [b, onB()],
          ] as const) {
            const mounted = mountsUnder(h.mnt);
            if (mounted.length !== list.length) throw new Error(`${h.id} shows ${mounted.length} mounts in the mount table`);
            for (const ws of list) {
              const row = await this.catalog!.getWorkspace('default', ws);
              const lease = await this.catalog!.getLease(ws);
              if (row.mountHost !== h.id || lease?.host !== h.id || lease.state !== 'live')
                throw new Error(`${ws}: the catalog records it on ${row.mountHost}, leased by ${lease?.host} (${lease?.state})`);
            }
          }
          return [`A: ${half}, B: ${half}; the catalog records each mount and live lease on its host`, { mountedA: half, mountedB: half }];
        },
      ],
      [
        'edit and checkpoint on both hosts',
        async () => {
          const edit = (h: TestHost, ws: string) => async () => {
            const body = `${h.id} wrote this in ${ws}\n`;
            writeFileSync(join(mnt(h, ws), EDITED), body);
            rmSync(join(mnt(h, ws), DELETED));
            const cp = await this.awc(h).checkpoint(ws, { message: `on ${h.id}` });
            this.committed.set(ws, { id: cp.id, host: h.id, body });
          };
          await Promise.all([this.each(onA(), (ws) => edit(a, ws)()), this.each(onB(), (ws) => edit(b, ws)())]);
          for (const [ws, c] of this.committed) {
            const head = (await this.catalog!.getWorkspace('default', ws)).headSnapshotId;
            if (head !== c.id) throw new Error(`${ws}: head ${head}, not its checkpoint ${c.id}`);
          }
          // written after the checkpoint: only on host A's disk, lost with it
          for (const ws of onA()) writeFileSync(join(mnt(a, ws), UNCHECKPOINTED), 'lost with host A\n');
          return [
            `${this.committed.size} checkpoints committed; A then wrote more that it never checkpointed`,
            { checkpoints: this.committed.size },
          ];
        },
      ],
      [
        "B may not take A's workspaces while A lives",
        async () => {
          const e = await this.refused(b, ['mount', onA()[0]!, join(b.mnt, 'early'), '--steal'], 'E_LEASED');
          if (!e.message.includes(`leased by host ${a.id}`) || !e.message.includes('until'))
            throw new Error(`E_LEASED does not name ${a.id} and the expiry: ${e.message}`);
          return [`E_LEASED with --steal: ${e.message}`, { code: e.code }];
        },
      ],
      [
        'host A is lost (SIGKILL of its daemon and supervisor)',
        async () => {
          const { daemon, supervisor } = a.pids();
          if (!daemon || !supervisor) throw new Error('host A runs no daemon');
          sendSignal(supervisor, 'SIGKILL');
          sendSignal(daemon, 'SIGKILL');
          return [`killed supervisor ${supervisor} and daemon ${daemon}`, { killed: [String(supervisor), String(daemon)] }];
        },
      ],
      [
        "A's leases expire by the database's clock; B's stay live",
        async () => {
          const t0 = Date.now();
          await waitFor(
            "A's leases to expire",
            async () => {
              if (this.opts.signal?.aborted) throw new Error('interrupted');
              return (await Promise.all(onA().map((ws) => this.catalog!.getLease(ws)))).every((l) => l?.state === 'expired');
            },
            this.ttl * 10 + 30_000,
          );
          const waited = Date.now() - t0;
          const bLeases = await Promise.all(onB().map((ws) => this.catalog!.getLease(ws)));
          if (!bLeases.every((l) => l?.host === b.id && l.state === 'live')) throw new Error("a lease of B's is not live");
          const e = await this.refused(b, ['mount', onA()[0]!, join(b.mnt, 'early')], 'E_LEASED');
          if (!/expired/.test(e.message)) throw new Error(`without --steal, E_LEASED should say the lease expired: ${e.message}`);
          return [
            `${half} expired ${waited} ms after the kill (TTL ${this.ttl} ms); without --steal still E_LEASED: ${e.message}`,
            { waitedMs: waited },
          ];
        },
      ],
      [
        "B takes A's workspaces over with --steal, at their last checkpoints",
        async () => {
          await this.each(onA(), (ws) => this.awc(b).mount(ws, mnt(b, ws), { steal: true }));
          for (const ws of onA()) {
            this.checkContents(mnt(b, ws), ws);
            if (existsSync(join(mnt(b, ws), UNCHECKPOINTED))) throw new Error(`${ws}: shows bytes that were never checkpointed`);
          }
          const shown = await this.ok(b, ['show', onA()[0]!]);
          const l = shown.lease;
          const want = this.committed.get(onA()[0]!)!.id;
          if (shown.headSnapshotId !== want || typeof shown.lastCheckpointAt !== 'string')
            throw new Error(`show: head ${shown.headSnapshotId}, last checkpoint ${shown.lastCheckpointAt}; expected head ${want}`);
          if (l.holder !== b.id || l.takenFrom !== a.id || l.epoch !== 2 || !/is lost/.test(l.note ?? ''))
            throw new Error(`show's lease does not say B took it from A at epoch 2: ${JSON.stringify(l)}`);
          return [
            `${half} workspaces on B with A's checkpointed bytes and none of the rest; show: ${l.note}`,
            { takenOver: half, epoch: l.epoch },
          ];
        },
      ],
      [
        "B's own workspaces are untouched",
        async () => {
          for (const ws of onB()) this.checkContents(mnt(b, ws), ws);
          return [`${half} workspaces as B left them`, { untouched: half }];
        },
      ],
      [
        'a late checkpoint from A is refused',
        async () => {
          const ws = onA()[0]!;
          const e = await this.refused(a, ['checkpoint', ws], 'E_LEASE_LOST');
          const upper = workspaceDirs(pathsOf({ home: a.home }).workspaces, ws).upper;
          if (!existsSync(join(upper, UNCHECKPOINTED))) throw new Error("A's uncheckpointed changes are gone from its disk");
          if ((await this.catalog!.getWorkspace('default', ws)).headSnapshotId !== this.committed.get(ws)!.id)
            throw new Error('the head moved');
          return [`E_LEASE_LOST: ${e.message}`, { code: e.code }];
        },
      ],
      [
        'A comes back (a new daemon, a new session): still refused, its leases shown lost',
        async () => {
          await this.ok(a, ['daemon', 'start']);
          const refused = await Promise.all(onA().map((ws) => this.refusedLib(this.awc(a).checkpoint(ws), 'E_LEASE_LOST')));
          const listed = (await this.ok(a, ['ls'])).workspaces as { id: string; lease: { here: string } }[];
          const lost = listed.filter((w) => onA().includes(w.id) && w.lease.here === 'lost').length;
          if (lost !== half) throw new Error(`ls on A shows ${lost} of ${half} leases lost`);
          await this.ok(a, ['unmount', onA()[0]!, '--discard']);
          await this.each(onA().slice(1), (ws) => this.awc(a).unmount(ws, { discard: true }));
          for (const ws of onA())
            if ((await this.catalog!.getWorkspace('default', ws)).mountHost !== b.id) throw new Error(`${ws}: B's mount record changed`);
          return [
            `${refused.length} checkpoints refused (E_LEASE_LOST), ls shows ${lost} lost; A discarded its stale changes`,
            { refused: refused.length, lost },
          ];
        },
      ],
      [
        "B goes on from A's checkpoint",
        async () => {
          const ws = onA()[0]!;
          writeFileSync(join(mnt(b, ws), 'b.txt'), 'b\n');
          const cp = await this.ok(b, ['checkpoint', ws]);
          if (cp.parent !== this.committed.get(ws)!.id) throw new Error(`parent ${cp.parent}, not A's checkpoint`);
          return [`checkpoint ${cp.id} on B, parent ${cp.parent} (A's)`, { parent: cp.parent }];
        },
      ],
    ];
  }

  /** The edited file holds what its host wrote before the checkpoint, the deleted one is gone, the rest as imported. */
  private checkContents(dir: string, ws: string): void {
    const c = this.committed.get(ws)!;
    const got = readFileSync(join(dir, EDITED), 'utf8');
    if (got !== c.body) throw new Error(`${ws}: ${EDITED} holds ${JSON.stringify(got)}, not what ${c.host} checkpointed`);
    if (existsSync(join(dir, DELETED))) throw new Error(`${ws}: ${DELETED} is back`);
    if (readFileSync(join(dir, 'pkg', 'lib', 'm199.js'), 'utf8') !== 'module.exports = 199;\n'.repeat(50))
      throw new Error(`${ws}: m199.js differs`);
  }

  private async step(name: string, fn: () => Promise<[string, SmokeStep['facts']?]>): Promise<boolean> {
    const t0 = performance.now();
    let s: SmokeStep;
    try {
      const [detail, facts = {}] = await fn();
      s = { step: name, ok: true, detail, ms: Math.round(performance.now() - t0), facts };
    } catch (err) {
      s = {
        step: name,
        ok: false,
        detail: err instanceof Error ? err.message : String(err),
        ms: Math.round(performance.now() - t0),
        facts: {},
      };
    }
    this.steps.push(s);
    this.emit('step', s);
    return s.ok;
  }

  /** Host `h`'s service in this process. @throws Error "interrupted" once the signal aborted */
  private awc(h: TestHost): Awc {
    if (this.opts.signal?.aborted) throw new Error('interrupted');
    return this.lib.get(h)!;
  }

  /** The AwcError of a service call that must fail with `code`. @throws Error when it succeeds or fails otherwise */
  private async refusedLib(p: Promise<unknown>, code: string): Promise<{ code: string; message: string }> {
    try {
      await p;
    } catch (e) {
      if (e instanceof AwcError && e.code === code) return e;
      throw new Error(`expected ${code}, got ${e instanceof AwcError ? `${e.code}: ${e.message}` : String(e)}`);
    }
    throw new Error(`succeeded; expected ${code}`);
  }

  /** Runs `awc --json …` on host `h` as a child process. @throws Error "interrupted" once the signal aborted */
  private async run1(h: TestHost, args: string[]): Promise<CliResult> {
    if (this.opts.signal?.aborted) throw new Error('interrupted');
    return h.spawn(args);
  }

  /** The JSON of a command that must succeed. @throws Error with the command's error line otherwise */
  private async ok(h: TestHost, args: string[]): Promise<any> {
    const r = await this.run1(h, args);
    if (r.code !== 0) throw new Error(`${h.id}: awc ${args.join(' ')} exited ${r.code}: ${r.stderr.trim().split('\n').pop()}`);
    return r.json;
  }

  /** The error of a command that must fail with `code`. @throws Error when it succeeds or fails otherwise */
  private async refused(h: TestHost, args: string[], code: string): Promise<{ code: string; message: string }> {
    const r = await this.run1(h, args);
    if (r.code === 0) throw new Error(`${h.id}: awc ${args.join(' ')} succeeded; expected ${code}`);
    const e = errorOf(r);
    if (e.code !== code) throw new Error(`${h.id}: awc ${args.join(' ')}: expected ${code}, got ${e.code}: ${e.message}`);
    return e;
  }

  /** Runs `fn` on every item, PARALLEL at a time. @throws the first failure, after all have settled */
  private async each(items: string[], fn: (item: string) => Promise<unknown>): Promise<void> {
    const queue = [...items];
    const errors: unknown[] = [];
    const worker = async () => {
      for (let x = queue.shift(); x !== undefined; x = queue.shift()) await fn(x).catch((e: unknown) => errors.push(e));
    };
    await Promise.all(Array.from({ length: PARALLEL }, worker));
    if (errors.length > 0) throw errors[0];
  }

  /** Stops both daemons, unmounts everything under the work directory, closes the catalog, removes the directory. Never throws. */
  private async cleanup(): Promise<void> {
    for (const lib of this.lib.values()) await lib.close().catch((e: unknown) => this.emit('cleanup', `closing a service: ${String(e)}`));
    for (const h of [this.b, this.a]) stopTestHost(h, join(this.opts.workDir, h.id));
    const left = mountsUnder(this.opts.workDir);
    if (left.length > 0) this.emit('cleanup', `still mounted after the clean-up: ${left.join(', ')}`);
    await this.catalog?.close().catch((e: unknown) => this.emit('cleanup', `closing the catalog: ${String(e)}`));
    try {
      if (left.length === 0) rmSync(this.opts.workDir, { recursive: true, force: true });
    } catch (e) {
      this.emit('cleanup', `removing ${this.opts.workDir}: ${String(e)}`);
    }
  }
}
