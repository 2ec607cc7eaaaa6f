// A warm worker's entry (scripts/bundle-cli.mjs: dist/cli/warm-worker.js), forked by src/daemon/warm/warm-pool.ts.
import { runWarmWorker } from './warm-worker.js';

runWarmWorker();
