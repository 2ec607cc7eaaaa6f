import * as fs from 'node:fs';
import { DirFd } from '../../core/dir-fd.js';
import type { Entry } from '../../core/tree.js';
import type { FileStat } from '../../host/tree/dir-check.js';
import { nameFromBytes } from '../../core/raw-name.js';

/**
 * Records ino, size, mtime and ctime (ns) of every path under `dir` for the copy driver's
 * stat cache, walking through directory descriptors (a directory swapped for a symlink is
 * recorded as the symlink, never followed). Paths in `skip` (files stored while they kept
 * changing) are left out, so that the next checkpoint reads them again.
 * @returns slash path → [ino, size, mtimeNs, ctimeNs] (decimal strings); {} when `dir` is missing. @throws AwcError E_PERMISSION
 */
export function recordStats(dir: string, skip: string[] = []): Record<string, [string, string, string, string]> {
  const out: Record<string, [string, string, string, string]> = {};
  const omit = new Set(skip);
  const walk = (d: DirFd): void => {
    for (const raw of d.list()) {
      const name = nameFromBytes(raw);
      const st = d.lstat(name);
      if (!st) continue;
      const r = d.childRel(name);
      if (!omit.has(r)) out[r] = [st.ino.toString(), st.size.toString(), st.mtimeNs.toString(), st.ctimeNs.toString()];
      if (!st.isDirectory()) continue;
      const found = d.open(name, st);
      if (found?.type === 'file') fs.closeSync(found.fd);
      if (found?.type !== 'dir') continue;
      try {
        walk(found.dir);
      } finally {
        found.dir.close();
      }
    }
  };
  const root = DirFd.openRoot(dir);
  if (!root) return out;
  try {
    walk(root.dir);
  } finally {
    root.dir.close();
  }
  return out;
}

/**
 * The stat-cache test of a copy scan (importDir's `reuse`): a file or symlink whose inode,
 * size, mtime and ctime are as recorded in `cache` is its `base` entry, unread.
 */
export function reuseByStat(
  cache: Record<string, [string, string, string, string]>,
  base: Map<string, Entry>,
): (rel: string, st: FileStat) => Entry | undefined {
  return (rel, st) => {
    const c = cache[rel];
    if (!c || c[0] !== st.ino.toString() || c[1] !== st.size.toString() || c[2] !== st.mtimeNs.toString() || c[3] !== st.ctimeNs.toString())
      return undefined;
    const e = base.get(rel);
    return e && (e.type === 'file' || e.type === 'symlink') ? e : undefined;
  };
}
