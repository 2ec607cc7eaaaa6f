import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { toAwcError } from '../../core/errors.js';

/** The `_meta` key under which a tool error carries AWC's error object (`{code, message, hint, retryable, details?}`). */
export const ERROR_META_KEY = 'awc/error';

/** A tool's success: the data as `structuredContent` and, for clients that read only text, as JSON text. */
export function toolOk(data: Record<string, unknown>): CallToolResult {
  return { content: [{ type: 'text', text: JSON.stringify(data) }], structuredContent: data };
}

/**
 * A tool error (`isError: true`, docs/reference/mcp.md#errors): the text is `CODE: message`
 * and `hint: …` on a second line; `_meta["awc/error"]` is the error as the CLI prints it with
 * `--json`. No `structuredContent` (the SDK's client would check it against the tool's output
 * schema). An E_INTERNAL (a bug) also goes to `log` with its stack.
 */
export function toolError(err: unknown, log: (line: Record<string, unknown>) => void): CallToolResult {
  const e = toAwcError(err);
  if (e.code === 'E_INTERNAL') log({ level: 'error', msg: e.message, stack: e.cause instanceof Error ? e.cause.stack : e.stack });
  return {
    isError: true,
    content: [{ type: 'text', text: `${e.code}: ${e.message}\nhint: ${e.hint}` }],
    _meta: { [ERROR_META_KEY]: e.toJSON() },
  };
}
