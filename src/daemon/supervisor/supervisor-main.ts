#!/usr/bin/env node
/**
 * Entry point of the host daemon's supervisor (what `awc daemon start` and on-demand starts
 * run, detached): `node supervisor-main.js [--home DIR]`, the rest of the configuration from
 * the environment as for `awc`. Kept apart from the CLI so that the long-lived supervisor loads
 * only what it needs. Logs JSON lines on stderr.
 */
import { loadConfig } from '../../config/config.js';
import { runSupervisor } from './supervisor.js';

const i = process.argv.indexOf('--home');
const home = i >= 0 ? process.argv[i + 1] : undefined;
const config = loadConfig({ home });
const code = await runSupervisor(config, (l) =>
  process.stderr.write(JSON.stringify({ time: new Date().toISOString(), role: 'supervisor', ...l }) + '\n'),
);
process.exit(code);
