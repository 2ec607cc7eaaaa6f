import type { ServerResponse } from 'node:http';
import { AwcError } from '../../core/errors.js';
import type { Digest } from '../../core/digest.js';
import type { ChunkRef, RootObject, TreeObject } from '../../core/tree.js';
import type { Awc } from '../../service/workspace/awc.js';

/** What one snapshot reaches: its root, every tree and every file content (with its chunks). */
interface Reach {
  root: Digest;
  trees: Set<Digest>;
  files: Map<Digest, ChunkRef[]>;
}

/** How many snapshots' reach sets a daemon keeps (each is O(entries) of memory). */
const CACHED_REACHES = 8;

/**
 * The snapshot-scoped content reads of an ordinary user's socket (docs/explanation/git.md
 * "Ordinary users"): `git export` runs in the user's process, as the user, and reads the
 * trees and file contents of the snapshots it exports through these. A read names the
 * snapshots it belongs to (`snapshots`: ids the user got from the daemon); each is looked up
 * in the call's namespace (already checked against the user's rules), and the digest must be
 * that snapshot's root, a tree below it, or a file content in it: a user reads nothing a
 * mount of those snapshots would not show them. A file is read by its content digest with the
 * daemon's own chunk list, never chunks the caller names.
 */
export class UserContent {
  private readonly reaches = new Map<string, Reach>();

  /** The root object of one of `snapshots`. @throws E_PERMISSION (not one of their roots), E_NOT_FOUND */
  async readRoot(awc: Awc, snapshots: readonly string[], digest: string): Promise<RootObject> {
    const d = await this.find(awc, snapshots, digest, (r, d) => r.root === d);
    return awc.reader().readRoot(d.digest);
  }

  /** A tree object below one of `snapshots`. @throws E_PERMISSION, E_NOT_FOUND */
  async readTree(awc: Awc, snapshots: readonly string[], digest: string): Promise<TreeObject> {
    const d = await this.find(awc, snapshots, digest, (r, d) => r.trees.has(d));
    return awc.reader().readTree(d.digest);
  }

  /** Streams the content of a file (by content digest) of one of `snapshots` as the response body. @throws E_PERMISSION, E_NOT_FOUND */
  async streamFile(awc: Awc, snapshots: readonly string[], digest: string, res: ServerResponse): Promise<void> {
    const { reach, digest: d } = await this.find(awc, snapshots, digest, (r, d) => r.files.has(d));
    const chunks = reach.files.get(d)!;
    res.writeHead(200, { 'content-type': 'application/octet-stream' });
    for await (const b of awc.reader().readData({ chunks })) if (!res.write(b)) await new Promise((r) => res.once('drain', r));
    res.end();
  }

  /**
   * The reach of the first of `snapshots` (in the namespace) that `has` the digest, and the
   * digest (the shapes were checked by the caller: src/daemon/users/user-schemas.ts ContentArgs).
   */
  private async find(
    awc: Awc,
    snapshots: readonly string[],
    digest: string,
    has: (r: Reach, d: Digest) => boolean,
  ): Promise<{ reach: Reach; digest: Digest }> {
    if (snapshots.length > 64) throw new AwcError('E_USAGE', 'snapshots must be a list of at most 64 snapshot ids');
    const d = digest as Digest; // compared with the reach's digests only: one that is no digest is in none
    for (const id of snapshots) {
      const reach = await this.reach(awc, (await awc.getSnapshot(id)).root);
      if (has(reach, d)) return { reach, digest: d };
    }
    throw new AwcError('E_PERMISSION', `${digest} is not part of the snapshots named (${snapshots.join(', ')})`, {
      hint: 'A user reads only the contents of snapshots of their namespaces.',
    });
  }

  /** Walks the snapshot with root `root` once (then cached, a few at a time). */
  private async reach(awc: Awc, root: Digest): Promise<Reach> {
    const cached = this.reaches.get(root);
    if (cached) return cached;
    const reader = awc.reader();
    const r: Reach = { root, trees: new Set(), files: new Map() };
    let level = [(await reader.readRoot(root)).tree];
    while (level.length > 0) {
      for (const t of level) r.trees.add(t);
      const next: Digest[] = [];
      for (const tree of await reader.readTrees(level)) {
        for (const e of tree.entries) {
          if (e.type === 'dir' && !r.trees.has(e.tree)) next.push(e.tree);
          else if (e.type === 'file') r.files.set(e.digest, e.chunks);
        }
      }
      level = [...new Set(next)];
    }
    if (this.reaches.size >= CACHED_REACHES) this.reaches.delete(this.reaches.keys().next().value!);
    this.reaches.set(root, r);
    return r;
  }
}
