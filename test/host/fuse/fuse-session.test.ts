import { test } from 'node:test';
import assert from 'node:assert/strict';
import { appendFileSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NodeLog, readSessionState, writeSessionState } from '../../../src/host/fuse/fuse-session.js';

const hex = (c: string) => c.repeat(64);

test('the node log replays ids in order, drops a torn last record, and a fresh log starts empty', () => {
  const dir = mkdtempSync(join(tmpdir(), 'awc-nodelog-'));
  try {
    const file = join(dir, 'nodes.bin');
    const log = new NodeLog(file, true);
    log.add(hex('a'), 1);
    log.add(hex('b'), 2 ** 40);
    log.flush();
    log.add(hex('c'), 3);
    assert.equal(NodeLog.read(file).length, 2, 'queued records are not written before flush');
    log.flush();
    log.close();
    assert.equal(statSync(file).mode & 0o777, 0o600);
    appendFileSync(file, Buffer.alloc(17)); // a write cut short by a crash
    assert.deepEqual(NodeLog.read(file), [
      [hex('a'), 1],
      [hex('b'), 2 ** 40],
      [hex('c'), 3],
    ]);
    const again = new NodeLog(file, false);
    again.add(hex('d'), 4);
    again.flush();
    again.close();
    assert.equal(NodeLog.read(file).at(-1)?.[0], hex('d'));
    new NodeLog(file, true).close();
    assert.deepEqual(NodeLog.read(file), []);
    assert.deepEqual(NodeLog.read(join(dir, 'missing')), []);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the session state round-trips and an unreadable one is no session', () => {
  const dir = mkdtempSync(join(tmpdir(), 'awc-session-'));
  try {
    const file = join(dir, 'session.json');
    assert.equal(readSessionState(file), undefined);
    const s = { v: 1 as const, connId: 42, protoMinor: 45, mountTime: 1_700_000_000, cloned: true, mountpoint: '/x/content' };
    writeSessionState(file, s);
    assert.deepEqual(readSessionState(file), s);
    assert.equal(statSync(file).mode & 0o777, 0o600);
    writeFileSync(file, '{"v":1,"connId":"x"}');
    assert.equal(readSessionState(file), undefined);
    writeFileSync(file, 'not json');
    assert.equal(readSessionState(file), undefined);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
