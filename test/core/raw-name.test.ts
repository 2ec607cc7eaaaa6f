/**
 * Names as raw bytes (issue 12, fidelity item 1; src/core/raw-name.ts, tree format v2 in
 * src/core/tree.ts): every byte string a Linux file name can be survives the string form and
 * the tree encoding byte for byte; trees of UTF-8 names stay v1 with their digests (test/tree
 * pins one), and only trees that need it are v2.
 */
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import fc from 'fast-check';
import { sha256 } from '../../src/core/digest.js';
import { compareNameBytes, hasEscape, isCanonicalName, nameFromBytes, nameToBytes } from '../../src/core/raw-name.js';
import { checkName, decodeTree, encodeTree, type Entry } from '../../src/core/tree.js';
import { errorCode } from '../helpers/assert-errors.js';

const attrs = { mode: 0o644, uid: 0, gid: 0, mtimeNs: '1700000000123456789' };
const file = (name: string): Entry => ({ type: 'file', name, ...attrs, size: 0, digest: sha256(''), chunks: [] });
/** A Linux file name: 1 … 255 bytes, no '/' and no NUL. */
const linuxName = fc.uint8Array({ minLength: 1, maxLength: 255 }).filter((b) => !b.includes(0x2f) && !b.includes(0));

test('every byte string maps to one canonical string and back, byte for byte; UTF-8 maps to itself', () => {
  fc.assert(
    fc.property(linuxName, (b) => {
      const s = nameFromBytes(b);
      assert.ok(nameToBytes(s).equals(Buffer.from(b)));
      assert.equal(isCanonicalName(s), true);
      const utf8 = Buffer.from(Buffer.from(b).toString('utf8'), 'utf8').equals(Buffer.from(b));
      assert.equal(hasEscape(s), !utf8, 'an escape exactly when the bytes are not UTF-8');
      if (utf8) assert.equal(s, Buffer.from(b).toString('utf8'));
    }),
    { numRuns: 2000 },
  );
  fc.assert(
    fc.property(fc.string({ unit: 'binary', minLength: 1 }), (s) => {
      assert.equal(nameFromBytes(Buffer.from(s, 'utf8')), s, 'a well-formed string is its own form');
    }),
  );
});

test('the escapes: invalid, overlong, surrogate and truncated sequences byte by byte; NFC and NFD stay two names', () => {
  assert.equal(nameFromBytes(Buffer.from([0x61, 0xff, 0x62])), 'a\udcffb');
  assert.equal(nameFromBytes(Buffer.from([0xc0, 0xaf])), '\udcc0\udcaf', 'an overlong "/" is two raw bytes, never a slash');
  assert.equal(nameFromBytes(Buffer.from([0xed, 0xa0, 0x80])), '\udced\udca0\udc80', 'an encoded surrogate');
  assert.equal(nameFromBytes(Buffer.from([0xe2, 0x82])), '\udce2\udc82', 'a truncated sequence');
  assert.equal(nameFromBytes(Buffer.from([0xf4, 0x90, 0x80, 0x80])), '\udcf4\udc90\udc80\udc80', 'past U+10FFFF');
  assert.equal(nameFromBytes(Buffer.from('😀', 'utf8')), '😀');
  const nfc = 'caf\u00e9';
  const nfd = 'cafe\u0301';
  assert.notEqual(nameFromBytes(Buffer.from(nfc)), nameFromBytes(Buffer.from(nfd)));
  assert.equal(hasEscape(nfc) || hasEscape(nfd), false);
  // strings no byte string gives
  for (const bad of ['\udcc3\udca9' /* the bytes of é */, 'a\ud800', '\udc41' /* an escape of a byte < 0x80 */, '\udd00'])
    assert.equal(isCanonicalName(bad), false, JSON.stringify(bad));
  assert.ok(compareNameBytes('z', 'a\udcff') > 0 && compareNameBytes('\u00e9', '\udcff') < 0, 'raw bytes order: é is C3 A9 < FF');
});

test('trees: UTF-8 names keep v1; a raw name or link target makes v2, which decodes to the same names; the rules hold', () => {
  const v1 = encodeTree([file('a'), file('café')]);
  assert.equal(decodeTree(v1.bytes).v, 1);
  assert.match(v1.bytes.toString('utf8'), /^\{"v":1,/);

  const raw = nameFromBytes(Buffer.from([0x66, 0xe9, 0x0a])); // latin-1 "fé\n"
  const target = nameFromBytes(Buffer.from([0x2e, 0x2e, 0x2f, 0xff]));
  const entries: Entry[] = [
    file('\nlead'),
    file(raw),
    file('z'),
    file('x'.repeat(255)),
    { type: 'symlink', name: 'link', ...attrs, target },
  ];
  const v2 = encodeTree(entries);
  const text = v2.bytes.toString('utf8');
  assert.match(text, /^\{"v":2,/);
  assert.ok(text.includes('"name":"f\\udce9\\n"'), text);
  assert.equal(v2.bytes.toString('utf8').isWellFormed(), true, 'the encoding itself is valid UTF-8 JSON');
  const back = decodeTree(v2.bytes);
  assert.deepEqual(
    back.entries.map((e) => e.name),
    ['\nlead', raw, 'link', 'x'.repeat(255), 'z'],
    'sorted by raw bytes (f E9 0A between \\n and l)',
  );
  assert.ok(nameToBytes(back.entries[1]!.name).equals(Buffer.from([0x66, 0xe9, 0x0a])));
  const l = back.entries.find((e) => e.type === 'symlink');
  assert.ok(l?.type === 'symlink' && nameToBytes(l.target).equals(Buffer.from([0x2e, 0x2e, 0x2f, 0xff])));
  assert.equal(encodeTree(back.entries).digest, v2.digest, 'canonical: the same bytes again');
  assert.equal(
    encodeTree([{ type: 'symlink', name: 'l', ...attrs, target }])
      .bytes.toString()
      .startsWith('{"v":2,'),
    true,
  );

  const code = (f: () => unknown) => {
    try {
      f();
    } catch (err) {
      return errorCode(err);
    }
    return 'none';
  };
  const v1WithRaw = Buffer.from(JSON.stringify({ v: 1, entries: [file(raw)] }));
  assert.equal(
    code(() => decodeTree(v1WithRaw)),
    'E_UNSUPPORTED_NAME',
    'v1 holds UTF-8 names only',
  );
  const v2WithoutRaw = Buffer.from(JSON.stringify({ v: 2, entries: [file('a')] }));
  assert.equal(
    code(() => decodeTree(v2WithoutRaw)),
    'E_FORMAT',
    'a tree that does not need v2 is v1: one encoding per tree',
  );
  const notCanonical = Buffer.from(JSON.stringify({ v: 2, entries: [file('\udcc3\udca9')] }));
  assert.equal(
    code(() => decodeTree(notCanonical)),
    'E_UNSUPPORTED_NAME',
  );
  assert.equal(
    code(() => encodeTree([file('a\ud800')])),
    'E_UNSUPPORTED_NAME',
  );
  assert.equal(
    code(() => checkName(raw)),
    'E_UNSUPPORTED_NAME',
    'callers that do not take raw names still refuse them',
  );
  assert.equal(
    code(() => checkName(raw, true)),
    'none',
  );
  assert.equal(
    code(() => checkName(nameFromBytes(Buffer.from('..')), true)),
    'E_PATH_TRAVERSAL',
  );
});
