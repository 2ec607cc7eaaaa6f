import type { Digest } from '../../core/digest.js';
import type { Entry } from '../../core/tree.js';
import type { ContentReader } from '../../store/content-reader.js';
import type { ContentWriter } from '../../store/content-writer.js';
import { LEFT_OUT_DEVICE, LEFT_OUT_SETID } from '../../host/export-dir.js';

/**
 * Puts entries a copy materialisation left out back into a scanned root: a device node
 * whose name is still free in its (still existing) directory, and the setuid/setgid bits
 * of a file whose content and other mode bits are unchanged (as the kernel clears them on
 * a write). Returns `scanned` itself when there is nothing to put back.
 */
export async function restoreLeftOut(
  src: ContentReader,
  writer: ContentWriter,
  scanned: Digest,
  base: Map<string, Entry>,
  leftOut: { path: string; reason: string }[] | undefined,
): Promise<Digest> {
  const wanted = new Map<string, Entry>();
  for (const l of leftOut ?? []) {
    const e = base.get(l.path);
    if (e && (l.reason === LEFT_OUT_DEVICE || l.reason === LEFT_OUT_SETID)) wanted.set(l.path, e);
  }
  if (wanted.size === 0) return scanned;
  const patch = async (tree: Digest, rel: string): Promise<Digest> => {
    const t = await src.readTree(tree);
    const entries = [...t.entries];
    let changed = false;
    for (let i = 0; i < entries.length; i++) {
      const e = entries[i]!;
      const p = rel === '' ? e.name : `${rel}/${e.name}`;
      const b = wanted.get(p);
      if (e.type === 'dir' && [...wanted.keys()].some((k) => k.startsWith(`${p}/`))) {
        const inner = await patch(e.tree, p);
        if (inner !== e.tree) entries[i] = { ...e, tree: inner };
        changed ||= inner !== e.tree;
      } else if (
        b?.type === 'file' &&
        e.type === 'file' &&
        e.digest === b.digest &&
        (e.mode & ~0o6000) === (b.mode & ~0o6000) &&
        e.mode !== b.mode
      ) {
        entries[i] = { ...e, mode: b.mode };
        changed = true;
      }
    }
    for (const [p, b] of wanted) {
      const slash = p.lastIndexOf('/');
      if ((slash < 0 ? '' : p.slice(0, slash)) !== rel || (b.type !== 'chardev' && b.type !== 'blockdev')) continue;
      if (entries.some((e) => e.name === b.name)) continue;
      entries.push(b);
      changed = true;
    }
    return changed ? writer.writeTree(entries) : tree;
  };
  const root = await src.readRoot(scanned);
  const tree = await patch(root.tree, '');
  if (tree === root.tree) return scanned;
  const { v: _v, type: _t, chunker: _c, ...attrs } = root;
  return writer.writeRoot({ ...attrs, tree });
}
