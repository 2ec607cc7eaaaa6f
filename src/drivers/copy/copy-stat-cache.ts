import * as fs from 'node:fs';
import { DirFd } from '../core/dir-fd.js';

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
      const name = raw.toString('utf8');
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
