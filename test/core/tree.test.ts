import { test } from 'node:test';
import assert from 'node:assert/strict';
import { sha256 } from '../../src/core/digest.js';
import { CHUNKER_ID, compareNames, decodeRoot, decodeTree, encodeRoot, encodeTree, type Entry } from '../../src/core/tree.js';

function code(err: unknown): string | undefined {
  return (err as { code?: string }).code;
}

const D1 = sha256('one');
const D2 = sha256('two');
const base = { mode: 0o644, uid: 1000, gid: 1000, mtimeNs: '1700000000123456789' };

const ENTRIES: Entry[] = [
  {
    type: 'file',
    name: 'b.txt',
    ...base,
    size: 3,
    digest: D1,
    chunks: [{ digest: D1, size: 3 }],
    xattrs: { 'user.z': 'eg==', 'user.a': 'YQ==' },
  },
  { type: 'dir', name: 'a', ...base, mode: 0o755, tree: D2 },
  { type: 'symlink', name: 'link', ...base, mode: 0o777, target: '/does/not/exist' },
  { type: 'hardlink', name: 'c.txt', target: 'b.txt' },
  { type: 'fifo', name: 'pipe', ...base, rdev: 0 },
  { type: 'file', name: 'empty', ...base, mode: 0o4755, size: 0, digest: sha256(''), chunks: [] },
];

test('tree digest is stable (pinned) and the encoding canonical', () => {
  const { bytes, digest } = encodeTree(ENTRIES);
  assert.equal(digest, sha256(bytes));
  assert.equal(digest, 'sha256:777c62f8161ced2e64a0075cd678ba37a861c98360eb0b1be4171312fa8af378');
  const text = bytes.toString('utf8');
  // Sorted by name bytes, fixed key order, xattrs sorted, mtime as a decimal string.
  assert.ok(
    text.startsWith('{"v":1,"entries":[{"type":"dir","name":"a","mode":493,"uid":1000,"gid":1000,"mtimeNs":"1700000000123456789","tree":'),
  );
  assert.ok(text.includes('"xattrs":{"user.a":"YQ==","user.z":"eg=="}'));
  assert.ok(text.includes('{"type":"hardlink","name":"c.txt","target":"b.txt"}'));
});

test('input order and key order do not matter', () => {
  const a = encodeTree(ENTRIES).digest;
  const shuffled = [...ENTRIES].reverse().map((e) => Object.fromEntries(Object.entries(e).reverse()) as unknown as Entry);
  assert.equal(encodeTree(shuffled).digest, a);
});

test('decode(encode(x)) round trips', () => {
  const { bytes } = encodeTree(ENTRIES);
  const t = decodeTree(bytes);
  assert.equal(t.v, 1);
  assert.deepEqual(
    t.entries.map((e) => e.name),
    ['a', 'b.txt', 'c.txt', 'empty', 'link', 'pipe'],
  );
  assert.equal(encodeTree(t.entries).digest, encodeTree(ENTRIES).digest);
});

test('names sort by UTF-8 bytes, not UTF-16 units', () => {
  const names = ['\u{1F600}', '\uFF01', 'a', 'Z', 'é'];
  const sorted = decodeTree(encodeTree(names.map((name) => ({ type: 'hardlink', name, target: 'x' }) as Entry)).bytes).entries.map(
    (e) => e.name,
  );
  assert.deepEqual(sorted, ['Z', 'a', 'é', '\uFF01', '\u{1F600}']);
  assert.ok(compareNames('\uFF01', '\u{1F600}') < 0);
});

test('duplicate names are rejected', () => {
  assert.throws(
    () => encodeTree([...ENTRIES, { type: 'hardlink', name: 'a', target: 'b.txt' }]),
    (e) => code(e) === 'E_FORMAT',
  );
});

test('bad names are rejected', () => {
  for (const name of ['', '.', '..', 'a/b', 'nul\0']) {
    assert.throws(
      () => encodeTree([{ type: 'hardlink', name, target: 'x' }]),
      (e) => code(e) === 'E_PATH_TRAVERSAL',
      JSON.stringify(name),
    );
  }
  assert.throws(
    () => encodeTree([{ type: 'hardlink', name: 'bad\uD800', target: 'x' }]),
    (e) => code(e) === 'E_UNSUPPORTED_NAME',
  );
});

test('decodeTree refuses what is not a v1 tree', () => {
  for (const s of ['not json', '{"v":2,"entries":[]}', '{"v":1}', '{"v":1,"entries":[{"type":"file","name":"x","digest":"md5:1"}]}']) {
    assert.throws(
      () => decodeTree(Buffer.from(s)),
      (e) => code(e) === 'E_FORMAT',
      s,
    );
  }
  assert.throws(
    () => decodeTree(Buffer.from('{"v":1,"entries":[{"type":"hardlink","name":"..","target":"x"}]}')),
    (e) => code(e) === 'E_PATH_TRAVERSAL',
  );
});

test('root objects: chunker recorded, digest pinned, round trip', () => {
  const tree = encodeTree(ENTRIES).digest;
  const { bytes, digest } = encodeRoot({ ...base, mode: 0o755, tree });
  assert.equal(digest, 'sha256:21394aaa3056b685c5efa751b78db570d348958e661570387cf6c4d82a0e9d98');
  const r = decodeRoot(bytes);
  assert.equal(r.chunker, CHUNKER_ID);
  assert.equal(r.tree, tree);
  assert.equal(r.mtimeNs, '1700000000123456789');
  const other = encodeRoot({ ...base, tree, chunker: 'fastcdc2020-other' });
  assert.throws(
    () => decodeRoot(other.bytes),
    (e) => code(e) === 'E_FORMAT',
  );
  assert.throws(
    () => decodeRoot(Buffer.from('{"v":1,"type":"tree"}')),
    (e) => code(e) === 'E_FORMAT',
  );
});
