import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { lstatSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { sha256, type Digest } from '../../src/core/digest.js';
import type { Awc } from '../../src/service/workspace/awc.js';
import { walkTree } from '../../src/store/content/tree-source.js';

/** A directory outside every workspace holding a file of random bytes nothing else contains. */
export interface Secret {
  dir: string;
  bytes: Buffer;
  digest: Digest;
}

/** Creates `dir` with `secret.bin` (8 KiB of random bytes, incompressible, so it would show verbatim in a pack). */
export function makeSecret(dir: string): Secret {
  mkdirSync(dir, { recursive: true });
  const bytes = randomBytes(8192);
  writeFileSync(join(dir, 'secret.bin'), bytes);
  return { dir, bytes, digest: sha256(bytes) };
}

/** sha256 digests of the regular files directly in /etc that this process can read (shadow, passwd, …). */
export function etcDigests(): Set<Digest> {
  const out = new Set<Digest>();
  for (const n of readdirSync('/etc')) {
    try {
      if (!lstatSync(join('/etc', n)).isFile()) continue;
      const b = readFileSync(join('/etc', n));
      if (b.length > 0) out.add(sha256(b));
    } catch {
      // unreadable: it cannot leak through us either
    }
  }
  return out;
}

/**
 * Asserts that no snapshot of the namespace holds a file whose content (or any chunk) is
 * one of `digests`, and (for a secret) that no pack under the home holds its bytes.
 */
export async function assertNoLeak(awc: Awc, digests: Set<Digest>, secret?: Secret): Promise<number> {
  const reader = awc.reader();
  const snaps = await awc.listSnapshots();
  for (const s of snaps) {
    for await (const { path, entry } of walkTree(reader, s.root)) {
      if (entry.type !== 'file') continue;
      assert.ok(!digests.has(entry.digest), `snapshot ${s.id} holds ${path}, a file from outside the workspace`);
      for (const c of entry.chunks)
        assert.ok(!digests.has(c.digest), `snapshot ${s.id} holds a chunk of a file from outside the workspace at ${path}`);
    }
  }
  if (secret) {
    const probe = secret.bytes.subarray(1000, 1064);
    const walk = (dir: string): void => {
      for (const n of readdirSync(dir)) {
        const p = join(dir, n);
        const st = lstatSync(p);
        if (st.isDirectory()) walk(p);
        else if (st.isFile()) assert.equal(readFileSync(p).indexOf(probe), -1, `${p} holds bytes of the secret`);
      }
    };
    walk(awc.paths.objects);
  }
  return snaps.length;
}
