/**
 * The local fleet smoke (`npm run smoke:fleet`, smoke/fleet-smoke.ts) as a test (issue 9, "How
 * it is checked"): two hosts with real daemons and mounts on one PostgreSQL catalog and one S3
 * bucket; host A is lost, B takes its workspaces over at their last checkpoints, A is fenced.
 * Every step's outcome is asserted, with what it saw.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { freshDatabaseFor } from '../helpers/postgres.js';
import { freshBucket } from '../helpers/s3.js';
import { tempDirFor } from '../helpers/temp-dir.js';
import { mountsUnder } from '../helpers/two-hosts.js';
import { FleetSmoke, type SmokeStep } from '../../smoke/fleet-smoke.js';

const root = process.getuid?.() === 0;

test(
  'fleet smoke: two hosts on one PostgreSQL catalog and one bucket; host A lost, B takes over at the last checkpoints, A is fenced',
  { skip: root ? false : 'needs root (overlay or bind mounts)', timeout: 300_000 },
  async (t) => {
    const db = await freshDatabaseFor(t);
    const bucket = await freshBucket(t);
    const workDir = join(await tempDirFor(t, 'awc-fleet-smoke-'), 'work');
    Object.assign(process.env, bucket.env); // (its in-process service calls read the credentials as the CLI does)
    const smoke = new FleetSmoke({ catalog: db.url, objectStore: bucket.url('fleet'), env: bucket.env, workDir, leaseTtlMs: 3000 });
    const emitted: SmokeStep[] = [];
    const cleanup: string[] = [];
    smoke.on('step', (s) => emitted.push(s));
    smoke.on('cleanup', (m) => cleanup.push(m));
    const steps = await smoke.run();

    assert.deepEqual(emitted, steps, 'each step is emitted as it ends');
    for (const s of steps) assert.ok(s.ok, `${s.step}: ${s.detail}`);
    const by = new Map(steps.map((s) => [s.step, s.facts]));
    assert.deepEqual(
      steps.map((s) => s.step),
      [
        'start the host daemons of A and B',
        'import on host A',
        'fork 20',
        'mount 10 on A and 10 on B',
        'edit and checkpoint on both hosts',
        "B may not take A's workspaces while A lives",
        'host A is lost (SIGKILL of its daemon and supervisor)',
        "A's leases expire by the database's clock; B's stay live",
        "B takes A's workspaces over with --steal, at their last checkpoints",
        "B's own workspaces are untouched",
        'a late checkpoint from A is refused',
        'A comes back (a new daemon, a new session): still refused, its leases shown lost',
        "B goes on from A's checkpoint",
      ],
    );
    assert.equal(by.get('import on host A')!.files, 201);
    assert.equal(by.get('fork 20')!.workspaces, 20);
    assert.deepEqual(by.get('mount 10 on A and 10 on B'), { mountedA: 10, mountedB: 10 });
    assert.equal(by.get('edit and checkpoint on both hosts')!.checkpoints, 20);
    assert.equal(by.get("B may not take A's workspaces while A lives")!.code, 'E_LEASED');
    assert.ok((by.get("A's leases expire by the database's clock; B's stay live")!.waitedMs as number) > 0);
    assert.deepEqual(by.get("B takes A's workspaces over with --steal, at their last checkpoints"), { takenOver: 10, epoch: 2 });
    assert.equal(by.get("B's own workspaces are untouched")!.untouched, 10);
    assert.equal(by.get('a late checkpoint from A is refused')!.code, 'E_LEASE_LOST');
    assert.deepEqual(by.get('A comes back (a new daemon, a new session): still refused, its leases shown lost'), { refused: 10, lost: 10 });
    // everything it started is gone
    assert.deepEqual(cleanup, []);
    assert.deepEqual(mountsUnder(workDir), []);
    assert.equal(existsSync(workDir), false);
    const sockets = by.get('start the host daemons of A and B')!.sockets as string[];
    assert.equal(sockets.length, 2);
    for (const s of sockets) assert.equal(existsSync(s), false, `${s} is gone with its daemon`);
  },
);
