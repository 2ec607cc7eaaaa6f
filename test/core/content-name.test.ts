/**
 * The content-name format (src/core/content-name.ts): the long and short names of a content
 * object in the content FUSE mount and the overlay redirects made of them. Round trips, the
 * bounds of each form, and garbage refused.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { describe, it } from 'node:test';
import {
  LONG_REDIRECT_BYTES,
  SHORT_NAME_LENGTH,
  SHORT_REDIRECT_BYTES,
  contentKey,
  contentKeyIn,
  isShortContentName,
  longContentRedirect,
  parseContentRedirect,
  shortContentName,
  shortContentRedirect,
} from '../../src/core/content-name.js';

const hexOf = (s: string) => createHash('sha256').update(s).digest('hex');

describe('content names', () => {
  it('round trips: a redirect parses back to the digest (long) or the short name (short) it was made of', () => {
    for (let i = 0; i < 200; i++) {
      const hex = hexOf(`c${i}`);
      const long = longContentRedirect(hex);
      assert.equal(long, `/${hex.slice(0, 2)}/${hex}`);
      assert.deepEqual(parseContentRedirect(long), { form: 'long', hex });
      const short = shortContentName(hex);
      assert.ok(isShortContentName(short), short);
      assert.deepEqual(parseContentRedirect(shortContentRedirect(hex)), { form: 'short', short });
      // the name fixes the digest's first 138 bits: the key parsed from it holds them
      const key = contentKey(short)!;
      assert.equal(key.short, true);
      assert.equal(key.bytes.toString('hex'), hex.slice(0, 34));
      assert.equal(key.tail, parseInt(hex.slice(34, 36), 16) >>> 6);
      assert.deepEqual(contentKey(hex), { bytes: Buffer.from(hex, 'hex'), short: false, tail: 0 });
    }
  });

  it('bounds: every short redirect is 24 bytes (the longest short name), every long one 68', () => {
    assert.equal(SHORT_NAME_LENGTH, 23);
    assert.equal(SHORT_REDIRECT_BYTES, 24);
    assert.equal(LONG_REDIRECT_BYTES, 68);
    for (const hex of ['0'.repeat(64), 'f'.repeat(64), hexOf('x')]) {
      assert.equal(shortContentName(hex).length, SHORT_NAME_LENGTH);
      assert.equal(Buffer.byteLength(shortContentRedirect(hex)), SHORT_REDIRECT_BYTES);
      assert.equal(Buffer.byteLength(longContentRedirect(hex)), LONG_REDIRECT_BYTES);
    }
    // the extremes of the alphabet: all zero bits and all one bits
    assert.equal(shortContentName('0'.repeat(64)), 'A'.repeat(23));
    assert.equal(shortContentName('f'.repeat(64)), '_'.repeat(23));
    const longest = `/${'_'.repeat(23)}`;
    assert.deepEqual(parseContentRedirect(longest), { form: 'short', short: '_'.repeat(23) });
    assert.equal(parseContentRedirect(`/${'_'.repeat(24)}`), undefined, 'one character too long for a short name');
    assert.equal(parseContentRedirect(`/${'_'.repeat(22)}`), undefined, 'one character too short');
  });

  it('a digest two objects share the short name of must use the long form, which tells them apart', () => {
    const prefix = hexOf('p').slice(0, 34);
    const a = `${prefix}00${'11'.repeat(14)}`;
    const b = `${prefix}3f${'22'.repeat(14)}`;
    assert.equal(shortContentName(a), shortContentName(b));
    assert.deepEqual(contentKey(shortContentName(a)), contentKey(shortContentName(b)));
    assert.notDeepEqual(parseContentRedirect(longContentRedirect(a)), parseContentRedirect(longContentRedirect(b)));
    assert.deepEqual(parseContentRedirect(longContentRedirect(b)), { form: 'long', hex: b });
  });

  it('refuses redirects that are not into the content mount', () => {
    const hex = hexOf('r');
    for (const bad of [
      '',
      '/',
      'x',
      shortContentName(hex), // no leading slash
      `${hex.slice(0, 2)}/${hex}`,
      `/${hex}`, // a long name without its directory
      `/${hex.slice(0, 2)}/${hex.toUpperCase()}`,
      `/${hex.slice(0, 2)}x${hex}`,
      `/${hex[0] === '0' ? '1' : '0'}${hex[1]}/${hex}`, // the wrong directory
      `/${hex.slice(0, 2)}/${hex.slice(0, 63)}g`,
      `/${'A'.repeat(22)}=`,
      `/${'A'.repeat(22)}/`,
      `/${'A'.repeat(22)}.`,
      '/sub/dir/file',
      '../file',
      `//${'A'.repeat(22)}`,
    ]) {
      assert.equal(parseContentRedirect(bad), undefined, JSON.stringify(bad));
    }
  });

  it('contentKeyIn: short names in the root, 64-hex names in the directory of their first two digits, nothing else', () => {
    const ROOT = 1;
    const DIR = 2; // directory `00` is node 2, `xy` is 2 + 0xxy
    const hex = hexOf('placed');
    const dirOf = DIR + parseInt(hex.slice(0, 2), 16);
    const short = shortContentName(hex);
    assert.deepEqual(contentKeyIn(ROOT, short, ROOT, DIR), contentKey(short));
    assert.deepEqual(contentKeyIn(dirOf, hex, ROOT, DIR), contentKey(hex));
    assert.equal(contentKeyIn(dirOf === DIR ? DIR + 1 : DIR, hex, ROOT, DIR), undefined, 'the wrong directory');
    assert.equal(contentKeyIn(ROOT, hex, ROOT, DIR), undefined, 'a long name in the root');
    assert.equal(contentKeyIn(dirOf, short, ROOT, DIR), undefined, 'a short name in a directory');
    assert.equal(contentKeyIn(ROOT, hex.slice(0, 2), ROOT, DIR), undefined, 'a directory is not content');
    assert.equal(contentKeyIn(DIR + 256, hex, ROOT, DIR), undefined, 'a content node is no directory');
  });

  it('refuses names that are neither a 64-hex digest nor a short name', () => {
    for (const bad of [
      '',
      'ab',
      'A'.repeat(22),
      'A'.repeat(24),
      `${'A'.repeat(22)}=`,
      `${'A'.repeat(22)}/`,
      'g'.repeat(64),
      'A'.repeat(64),
      hexOf('x').slice(1),
    ]) {
      assert.equal(contentKey(bad), undefined, JSON.stringify(bad));
      assert.equal(isShortContentName(bad), false, JSON.stringify(bad));
    }
  });
});
