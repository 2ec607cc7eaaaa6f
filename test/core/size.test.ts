import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { parseSize } from '../../src/core/size.js';

describe('parseSize', () => {
  it('reads bytes and binary units (K = 1024), case-insensitive, with or without iB', () => {
    const cases: [string, number][] = [
      ['0', 0],
      ['1048576', 1048576],
      ['100B', 100],
      ['512K', 512 * 1024],
      ['1.5M', 1.5 * 2 ** 20],
      ['10G', 10 * 2 ** 30],
      ['10g', 10 * 2 ** 30],
      ['10GiB', 10 * 2 ** 30],
      ['10Gi', 10 * 2 ** 30],
      ['2 T', 2 * 2 ** 40],
      ['1P', 2 ** 50],
      ['0.1K', 102],
    ];
    for (const [text, bytes] of cases) assert.equal(parseSize(text, '--x'), bytes, text);
  });

  it('refuses what is not a size, ambiguous decimal units, fractional bytes and sizes past 2^53', () => {
    for (const text of ['', 'G', '-1', '10x', '10GB', '10kb', '1.5', '1.5B', '8192P', 'none', '1e9']) {
      assert.throws(
        () => parseSize(text, '--stored-bytes'),
        (e: Error & { code?: string }) => e.code === 'E_USAGE' && e.message.includes('--stored-bytes'),
        text,
      );
    }
  });
});
