import { ERROR_CODES, type ErrorCode } from '../../core/errors.js';

/**
 * The hints of `awc mcp` tool errors in the words of the tools (docs/reference/mcp.md#errors):
 * AWC's errors are written for the CLI (`pass --force`, `` `awc unmount ws_… --discard` ``); an
 * agent calling a tool can only change the tool's parameters or call another tool. A CLI option
 * the failing tool has a parameter for becomes that parameter (`force: true`), a suggested
 * `awc` command that a tool does becomes that tool with its parameters, and a hint that still
 * names a CLI option afterwards (an administrator's command, a start option of the server) says
 * that it is for the person who runs the server.
 */

/** Per tool: the options of the CLI command it stands for, and the tool parameter each one is (a flag becomes `name: true`, an option taking a value its name). */
const PARAMS: Readonly<Record<string, Readonly<Record<string, string>>>> = {
  workspace_fork: { '--name': 'name', '--count': 'count', '--mount': 'mountPath' },
  workspace_mount: { '--warm': 'warm: true' },
  workspace_unmount: { '--force': 'force: true', '--discard': 'discard: true' },
  workspace_checkpoint: { '--message': 'message', '-m': 'message' },
  workspace_diff: { '--patch': 'format "patch"', '--binary': 'binary: true', '--metadata': 'metadata: true' },
  workspace_export: {
    '--force': 'overwrite: true',
    '--overwrite': 'overwrite: true',
    '--branch': 'branch',
    '--git': 'format "git" with path',
    '--tar': 'format "tar" with path',
    '--dir': 'format "dir" with path',
    '--message': 'message',
    '-m': 'message',
  },
  workspace_remove: { '--force': 'force: true' },
  prepare: { '--name': 'name', '--message': 'message', '-m': 'message' },
};

/** `awc` commands a hint may suggest, the tool that does the same, and the parameters its operands are, in order. */
const COMMANDS: Readonly<Record<string, { tool: string; operands: readonly string[] }>> = {
  fork: { tool: 'workspace_fork', operands: ['snapshot'] },
  ls: { tool: 'workspace_list', operands: [] },
  show: { tool: 'workspace_show', operands: ['workspace'] },
  mount: { tool: 'workspace_mount', operands: ['workspace', 'path'] },
  unmount: { tool: 'workspace_unmount', operands: ['workspace'] },
  checkpoint: { tool: 'workspace_checkpoint', operands: ['workspace'] },
  diff: { tool: 'workspace_diff', operands: ['from', 'to'] },
  export: { tool: 'workspace_export', operands: ['ref'] },
  rm: { tool: 'workspace_remove', operands: ['workspace'] },
  usage: { tool: 'usage', operands: [] },
  prepare: { tool: 'prepare', operands: ['path'] },
  label: { tool: 'label', operands: ['ref'] },
};

/** The hints of error codes whose registry hint (src/core/errors.ts) speaks of the CLI, as an MCP client reads them. */
const DEFAULTS: Readonly<Partial<Record<ErrorCode, string>>> = {
  E_USAGE: "The tool's input schema (tools/list) names its parameters and what each takes.",
  E_NOT_FOUND: 'snapshot_list and workspace_list list what this server sees.',
  E_NO_HOME:
    'No AWC home exists there yet: the prepare tool makes one from a directory under the root, or the person who runs this server imports a snapshot first.',
};

/** A CLI option in running text: `--word` or `-m`, not inside a word (`re-mount`, `x--y`). */
const OPTION = /(?<![\w-])(--[a-z][a-z-]*|-m)(?![\w-])/g;

/** What a hint that still names a CLI option is prefixed with. */
export const OPERATOR_PREFIX = 'For the person who runs this MCP server (the awc CLI; no tool parameter does it): ';

/**
 * `hint` of an error of tool `tool` with every CLI option it names that the tool has a
 * parameter for replaced by that parameter, every suggested `awc <command> …` that a tool does
 * replaced by that tool and its parameters, and {@link OPERATOR_PREFIX} before a hint that
 * still names a CLI option. An error's registry hint (`code`'s, src/core/errors.ts) that speaks of
 * the CLI is replaced by the MCP one first.
 */
export function toolHint(tool: string, hint: string, code?: ErrorCode): string {
  const given = code !== undefined && hint === ERROR_CODES[code].hint ? (DEFAULTS[code] ?? hint) : hint;
  const commands = given.replace(/`awc ([a-z]+)((?: [^`]*)?)`/g, (whole, cmd: string, rest: string) =>
    commandAsTool(whole, cmd, rest.trim()),
  );
  const params = PARAMS[tool] ?? {};
  const named = commands.replace(OPTION, (opt: string) => params[opt] ?? opt);
  return new RegExp(OPTION.source).test(named) ? OPERATOR_PREFIX + named : named;
}

/** `awc <cmd> <rest>` as "the <tool> tool (<param> <value>, …)", or `whole` unchanged when a word of it has no parameter. */
function commandAsTool(whole: string, cmd: string, rest: string): string {
  const c = COMMANDS[cmd];
  if (c === undefined) return whole;
  const params = PARAMS[c.tool] ?? {};
  const words = rest === '' ? [] : rest.split(/\s+/);
  const args: string[] = [];
  const set: string[] = [];
  let operands = 0;
  for (let i = 0; i < words.length; i++) {
    const w = words[i]!;
    const p = params[w];
    if (p !== undefined) {
      const takesValue = !p.includes(':') && i + 1 < words.length && !words[i + 1]!.startsWith('-');
      args.push(takesValue ? `${p} ${words[++i]!}` : p);
    } else if (cmd === 'label' && args.length > 0 && /^[a-z0-9][a-z0-9._/-]*=/.test(w)) {
      const eq = w.indexOf('=');
      set.push(`${JSON.stringify(w.slice(0, eq))}: ${JSON.stringify(w.slice(eq + 1))}`);
    } else if (!w.startsWith('-') && operands < c.operands.length && args.length === operands) {
      args.push(`${c.operands[operands++]!} ${w}`);
    } else {
      return whole;
    }
  }
  if (set.length > 0) args.push(`set {${set.join(', ')}}`);
  return `the ${c.tool} tool${args.length > 0 ? ` (${args.join(', ')})` : ''}`;
}
