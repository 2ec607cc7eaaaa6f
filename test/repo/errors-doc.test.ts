import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { ERROR_CODES } from '../../src/core/errors.js';

/** docs/reference/errors.md lists every registered code with its exit status and retryability. */
test('the error reference matches the code registry', () => {
  const doc = readFileSync(new URL('../../../docs/reference/errors.md', import.meta.url), 'utf8');
  const rows = new Map<string, [string, string]>();
  for (const m of doc.matchAll(/^\| `(E_[A-Z_]+)` \| (\d+) \| (yes|no) \|/gm)) rows.set(m[1], [m[2], m[3]]);
  for (const [code, spec] of Object.entries(ERROR_CODES)) {
    assert.deepEqual(rows.get(code), [String(spec.exit), spec.retryable ? 'yes' : 'no'], `${code} in docs/reference/errors.md`);
  }
  assert.equal(rows.size, Object.keys(ERROR_CODES).length, 'no stale codes in the doc');
});
