/**
 * Layer placeholders (src/drivers/overlay/layer-builder.ts): short redirects that fit in the inode, and
 * the fallback to long redirects when two contents of one snapshot share a short name. The
 * collision cannot be produced with real content (it needs a 138-bit SHA-256 prefix
 * collision), so that case uses an in-memory TreeSource with crafted digests — fault
 * injection next to the real layers every mount test builds. Needs root (trusted.* xattrs).
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { lstatSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { getAttributeSync } from 'fs-xattr';
import type { Digest } from '../../../src/core/digest.js';
import type { Entry, RootObject, TreeObject } from '../../../src/core/tree.js';
import { longContentRedirect, shortContentName, shortContentRedirect } from '../../../src/core/content-name.js';
import { buildLayer } from '../../../src/drivers/overlay/layer-builder.js';
import type { TreeSource } from '../../../src/store/content/tree-source.js';

const skip = process.getuid?.() === 0 ? false : 'needs root (trusted.* xattrs)';
const hexOf = (s: string) => createHash('sha256').update(s).digest('hex');
/** An mtime with a nanosecond remainder: Node's own utimes would lose its last three digits. */
const attrs = { mode: 0o100644, uid: 0, gid: 0, mtimeNs: '1700000000123456789' };

/** One root directory holding `files` (name → content digest hex, size). */
function source(files: [string, string, number][]): { src: TreeSource; root: Digest } {
  const entries: Entry[] = files.map(([name, hex, size]) => ({
    type: 'file',
    name,
    size,
    digest: `sha256:${hex}` as Digest,
    chunks: [{ digest: `sha256:${hex}` as Digest, size }],
    ...attrs,
  }));
  return sourceOf(entries);
}

/** One root directory holding `entries` as they are (a crafted, possibly hostile, tree). */
function sourceOf(entries: Entry[]): { src: TreeSource; root: Digest } {
  const tree: TreeObject = { v: 1, entries };
  const treeDigest = `sha256:${hexOf(JSON.stringify(tree))}` as Digest;
  const root: RootObject = { v: 1, type: 'root', chunker: 'test', tree: treeDigest, ...attrs, mode: 0o40755 };
  const rootDigest = `sha256:${hexOf(JSON.stringify(root))}` as Digest;
  const src: TreeSource = {
    readTree: async (d) => {
      assert.equal(d, treeDigest);
      return tree;
    },
    readRoot: async (d) => {
      assert.equal(d, rootDigest);
      return root;
    },
  };
  return { src, root: rootDigest };
}

const dirs: string[] = [];
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

describe('layer builder', { skip }, () => {
  it('placeholders get 24-byte short redirects, allocate no block, and carry the exact nanosecond mtime', async () => {
    const layers = mkdtempSync(join(tmpdir(), 'awc-layers-'));
    dirs.push(layers);
    const files: [string, string, number][] = Array.from({ length: 20 }, (_, i) => [
      `f${String(i).padStart(2, '0')}`,
      hexOf(`content ${i}`),
      1000 + i,
    ]);
    const { src, root } = source(files);
    const layer = await buildLayer(src, root, layers);
    for (const [name, hex, size] of files) {
      const p = join(layer.dir, name);
      const redirect = getAttributeSync(p, 'trusted.overlay.redirect').toString();
      assert.equal(redirect, `/${shortContentName(hex)}`);
      assert.equal(redirect, shortContentRedirect(hex));
      assert.equal(Buffer.byteLength(redirect), 24);
      const st = lstatSync(p);
      assert.equal(st.size, size);
      assert.equal(st.blocks, 0, `${name}: the overlay xattrs must fit in the inode`);
      assert.equal(lstatSync(p, { bigint: true }).mtimeNs.toString(), attrs.mtimeNs, `${name}: exact mtime`);
    }
    assert.equal(lstatSync(layer.dir, { bigint: true }).mtimeNs.toString(), attrs.mtimeNs, 'the root directory: exact mtime');
    assert.equal(Object.keys(JSON.parse(readFileSync(join(layers, root.slice(7), 'meta.json'), 'utf8')).contents).length, files.length);
  });

  it('a short name another content on the host already answers to: that file gets the long redirect', async () => {
    const layers = mkdtempSync(join(tmpdir(), 'awc-layers-'));
    dirs.push(layers);
    const files: [string, string, number][] = ['x', 'y', 'z'].map((n, i) => [n, hexOf(`taken ${n}`), 100 + i]);
    const { src, root } = source(files);
    const taken = files[1]![1];
    const layer = await buildLayer(src, root, layers, { shortNameFree: (hex) => hex !== taken });
    for (const [name, hex] of files) {
      const want = hex === taken ? longContentRedirect(hex) : shortContentRedirect(hex);
      assert.equal(getAttributeSync(join(layer.dir, name), 'trusted.overlay.redirect').toString(), want, name);
    }
  });

  it('two contents of one snapshot sharing a short name: the whole layer uses long redirects', async () => {
    const layers = mkdtempSync(join(tmpdir(), 'awc-layers-'));
    dirs.push(layers);
    const prefix = hexOf('shared prefix').slice(0, 34);
    const a = `${prefix}00${'11'.repeat(14)}`;
    const b = `${prefix}3f${'22'.repeat(14)}`; // same 138 bits, another digest
    const c = hexOf('unrelated');
    assert.equal(shortContentName(a), shortContentName(b));
    const { src, root } = source([
      ['a', a, 10],
      ['b', b, 20],
      ['c', c, 30],
    ]);
    const layer = await buildLayer(src, root, layers);
    for (const [name, hex] of [
      ['a', a],
      ['b', b],
      ['c', c],
    ] as const) {
      assert.equal(getAttributeSync(join(layer.dir, name), 'trusted.overlay.redirect').toString(), longContentRedirect(hex), name);
    }
  });

  it('a hardlink whose target goes through a symlink of the snapshot, or out of it, is refused (E_PATH_TRAVERSAL)', async () => {
    const layers = mkdtempSync(join(tmpdir(), 'awc-layers-'));
    dirs.push(layers);
    const host = mkdtempSync(join(tmpdir(), 'awc-host-secret-'));
    dirs.push(host);
    writeFileSync(join(host, 'secret'), 'a host file\n');
    const file: Entry = { type: 'file', name: 'f', size: 0, digest: `sha256:${hexOf('')}` as Digest, chunks: [], ...attrs };
    const cases: [string, Entry[]][] = [
      [
        'through a symlink',
        [
          { type: 'symlink', name: 'evil', target: host, ...attrs, mode: 0o120777 },
          { type: 'hardlink', name: 'h', target: 'evil/secret' },
        ],
      ],
      ['through ..', [file, { type: 'hardlink', name: 'h', target: `../${'x'}/secret` }]],
      [
        'to a symlink',
        [
          { type: 'symlink', name: 'evil', target: join(host, 'secret'), ...attrs, mode: 0o120777 },
          { type: 'hardlink', name: 'h', target: 'evil' },
        ],
      ],
      [
        'to a directory',
        [
          { type: 'dir', name: 'd', tree: `sha256:${hexOf('{"v":1,"entries":[]}')}` as Digest, ...attrs, mode: 0o40755 },
          { type: 'hardlink', name: 'h', target: 'd' },
        ],
      ],
    ];
    for (const [what, entries] of cases) {
      const { src, root } = sourceOf(entries);
      const withEmpty: TreeSource = {
        ...src,
        readTree: async (d) => (entries.some((e) => e.type === 'dir' && e.tree === d) ? { v: 1, entries: [] } : src.readTree(d)),
      };
      await assert.rejects(buildLayer(withEmpty, root, layers), (err: { code?: string }) => err.code === 'E_PATH_TRAVERSAL', what);
      assert.equal(lstatSync(join(host, 'secret')).nlink, 1, `${what}: the host file got no further name`);
      assert.deepEqual(readdirSync(layers), [], `${what}: no layer (nor its temporary) is left`);
    }
  });
});
