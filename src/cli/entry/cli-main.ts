// The bundled CLI's entry (scripts/bundle-cli.mjs: dist/cli/awc.js): the command in this process.
import { runCli } from './main.js';

await runCli(process.argv);
