import { strict as assert } from 'node:assert';
import { AwcError, type ErrorCode } from '../../src/core/errors.js';

/** The `code` property of a thrown value (an AwcError's code, or an errno / driver code), if any. */
export function errorCode(err: unknown): string | undefined {
  return (err as { code?: string }).code;
}

/** Awaits `p` and asserts that it rejects with an AwcError of `code`; returns that error. */
export async function rejectsWith(p: Promise<unknown>, code: ErrorCode): Promise<AwcError> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof AwcError, `expected AwcError ${code}, got ${String(err)}`);
    assert.equal(err.code, code, `expected ${code}, got ${err.code}: ${err.message}`);
    return err;
  }
  assert.fail(`expected ${code}, but it resolved`);
}
