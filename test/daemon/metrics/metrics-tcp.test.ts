/**
 * Issue 29, "Metrics to scrape": config `metricsAddress` makes the host daemon serve `GET
 * /metrics` over TCP (Prometheus scrapes HTTP over TCP, not a Unix socket), off by default,
 * loopback when on; nothing else of the daemon's API answers there.
 */
import { strict as assert } from 'node:assert';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { DEFAULT_METRICS_ADDRESS, parseMetricsAddress } from '../../../src/config/metrics-address.js';
import { awc, awcOk, cleanupMounts, errorOf, PROJECT } from '../../helpers/cli.js';
import { makeTempDir, removeTempDir } from '../../helpers/temp-dir.js';

/** A TCP port free on 127.0.0.1 a moment ago. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

describe('metricsAddress', () => {
  it('parses off, on, a port, ip:port and [ipv6]:port; refuses host names and bad ports with E_CONFIG', () => {
    assert.equal(parseMetricsAddress(undefined), undefined);
    assert.equal(parseMetricsAddress('off'), undefined);
    assert.deepEqual(parseMetricsAddress('on'), DEFAULT_METRICS_ADDRESS);
    assert.deepEqual(DEFAULT_METRICS_ADDRESS, { host: '127.0.0.1', port: 9464 });
    assert.deepEqual(parseMetricsAddress(9100), { host: '127.0.0.1', port: 9100 });
    assert.deepEqual(parseMetricsAddress('9100'), { host: '127.0.0.1', port: 9100 });
    assert.deepEqual(parseMetricsAddress('0.0.0.0:9100'), { host: '0.0.0.0', port: 9100 });
    assert.deepEqual(parseMetricsAddress('[::1]:9100'), { host: '::1', port: 9100 });
    for (const bad of ['localhost:9100', 'example.com:80', '127.0.0.1:0', '127.0.0.1:70000', '1.2.3:80', 'yes', '', true]) {
      assert.throws(
        () => parseMetricsAddress(bad),
        (e: { code?: string; hint?: string }) => e.code === 'E_CONFIG' && /metricsAddress|127\.0\.0\.1:9464/.test(`${String(e)} ${e.hint}`),
        String(bad),
      );
    }
  });

  describe('the daemon', () => {
    let work: string;
    let home: string;
    let port: number;

    before(async () => {
      work = await makeTempDir('awc-metrics-tcp-');
      home = join(work, 'home');
      mkdirSync(home, { mode: 0o700 });
      port = await freePort();
      writeFileSync(join(home, 'config.json'), JSON.stringify({ metricsAddress: `127.0.0.1:${port}`, warmCli: 'off' }));
    });

    after(async () => {
      awc(home, ['daemon', 'stop']);
      cleanupMounts(home, work);
      await removeTempDir(work);
    });

    it('serves GET /metrics on the configured TCP address, 404 for every other path, and stops with the daemon', async () => {
      awcOk(home, ['daemon', 'start']);
      const r = await fetch(`http://127.0.0.1:${port}/metrics`);
      assert.equal(r.status, 200);
      assert.match(r.headers.get('content-type') ?? '', /^text\/plain/);
      const text = await r.text();
      assert.match(text, /^# HELP awc_/m, 'the daemon metrics');
      assert.match(text, /^awc_process_resident_memory_bytes \d/m);
      for (const path of ['/v1/status', '/v1/metrics.json', '/'])
        assert.equal((await fetch(`http://127.0.0.1:${port}${path}`)).status, 404, path);
      const post = await fetch(`http://127.0.0.1:${port}/metrics`, { method: 'POST', body: '{}' });
      assert.equal(post.status, 404);
      awcOk(home, ['daemon', 'stop']);
      await assert.rejects(fetch(`http://127.0.0.1:${port}/metrics`), 'nothing listens once the daemon stopped');
    });

    it('a bad metricsAddress is refused at once with E_CONFIG', () => {
      const bad = join(work, 'bad-home');
      mkdirSync(bad, { mode: 0o700 });
      writeFileSync(join(bad, 'config.json'), JSON.stringify({ metricsAddress: 'localhost:9464' }));
      const r = awc(bad, ['daemon', 'status']);
      assert.equal(errorOf(r).code, 'E_CONFIG');
    });
  });
});

describe('the Grafana dashboard (docs/grafana/awc-dashboard.json)', () => {
  it('queries only metrics the daemon exports, grouped only by labels they have', async () => {
    const { DaemonMetrics } = await import('../../../src/daemon/metrics/metrics.js');
    const { HostSweeper } = await import('../../../src/daemon/session/host-sweeper.js');
    // the daemon's registry as it serves it: its own metrics and the host sweep's (registered by the sweeper, never started here)
    const metrics = new DaemonMetrics();
    new HostSweeper({ catalog: {} as never }, metrics, 0);
    // each series name the daemon exports (a histogram's _bucket, _sum and _count too) → its label names, and Prometheus's own
    const labels = new Map<string, Set<string>>();
    for (const metric of metrics.registry.getMetricsAsArray()) {
      const { name, labelNames, type } = metric as unknown as { name: string; labelNames?: string[]; type: string };
      const own = new Set(['instance', 'job', ...(labelNames ?? [])]);
      if (type === 'histogram') for (const s of ['_bucket', '_sum', '_count']) labels.set(name + s, new Set([...own, 'le']));
      else labels.set(name, own);
    }
    const dash = JSON.parse(readFileSync(join(PROJECT, 'docs', 'grafana', 'awc-dashboard.json'), 'utf8')) as {
      panels: { title: string; targets: { expr: string }[] }[];
    };
    assert.ok(dash.panels.length >= 8, 'a dashboard of the main figures');
    for (const p of dash.panels)
      for (const t of p.targets) {
        const used = [...t.expr.matchAll(/\b(awc_[a-z_]+)\b/g)].map((x) => x[1]!);
        assert.ok(used.length > 0, `${p.title}: queries an AWC metric`);
        for (const name of used) assert.ok(labels.has(name), `${p.title}: ${name} is exported by the daemon`);
        for (const by of t.expr.matchAll(/by \(([^)]*)\)/g))
          for (const label of by[1]!.split(',').map((x) => x.trim()))
            assert.ok(
              used.every((n) => labels.get(n)!.has(label)),
              `${p.title}: ${used.join(', ')} have label ${label}`,
            );
      }
  });
});
