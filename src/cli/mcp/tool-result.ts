import type { CallToolResult } from '@modelcontextprotocol/server';
import { AwcError, toAwcError } from '../../core/errors.js';
import { toolHint } from './tool-hints.js';

/** The `_meta` key under which a tool error carries AWC's error object (`{code, message, hint, retryable, details?}`). */
export const ERROR_META_KEY = 'awc/error';

/** A tool's success: the data as `structuredContent` and, for clients that read only text, as JSON text. */
export function toolOk(data: Record<string, unknown>): CallToolResult {
  return { content: [{ type: 'text', text: JSON.stringify(data) }], structuredContent: data };
}

/**
 * A tool error of tool `tool` (`isError: true`, docs/reference/mcp.md#errors): the text is
 * `CODE: message` and `hint: …` on a second line; `_meta["awc/error"]` is the error as the CLI
 * prints it with `--json`, its hint in the words of the tool (toolHint: the tool's parameters,
 * not CLI options). No `structuredContent` (the SDK's client would check it against the tool's
 * output schema). An E_INTERNAL (a bug) also goes to `log` with its stack.
 */
export function toolError(err: unknown, log: (line: Record<string, unknown>) => void, tool: string): CallToolResult {
  const raw = toAwcError(err);
  if (raw.code === 'E_INTERNAL') log({ level: 'error', msg: raw.message, stack: raw.cause instanceof Error ? raw.cause.stack : raw.stack });
  const e = new AwcError(raw.code, raw.message, { hint: toolHint(tool, raw.hint, raw.code), details: raw.details, cause: raw });
  return {
    isError: true,
    content: [{ type: 'text', text: `${e.code}: ${e.message}\nhint: ${e.hint}` }],
    _meta: { [ERROR_META_KEY]: e.toJSON() },
  };
}
