// The CLI's first module (scripts/bundle-cli.mjs: dist/cli/front.js, which dist/src/cli/main.js imports):
// a warm worker of the host daemon runs the command, or this process does (src/cli/front.ts).
import { front } from './front.js';

// (bundled, import.meta.url is this file's tsc output, dist/src/cli/front-main.js: the bundle is in dist/cli/)
await front(new URL('../../cli/', import.meta.url));
