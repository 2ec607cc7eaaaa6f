// The CLI's first module (scripts/bundle-cli.mjs: dist/cli/front.cjs, which `bin` runs and dist/src/cli/entry/main.js imports):
// a warm worker of the host daemon runs the command, or this process does (src/cli/warm/front.ts).
import { front } from '../warm/front.js';

// (bundled, import.meta.url is this file's tsc output, dist/src/cli/entry/front-main.js: the bundle is in dist/cli/;
// CommonJS has no top-level await: a rejection ends the process as an uncaught one would)
void front(new URL('../../../cli/', import.meta.url));
