import type { Digest } from '../../core/digest.js';
import type { Entry } from '../../core/tree.js';
import type { ContentReader } from '../../store/content/content-reader.js';
import type { ContentWriter } from '../../store/content/content-writer.js';
import { LEFT_OUT_CAPABILITY, LEFT_OUT_DEVICE, LEFT_OUT_ROOT_XATTRS, LEFT_OUT_SETID } from '../../host/tree/export-dir.js';
import { isPrivilegeXattr } from '../../host/tree/xattrs.js';

/**
 * Puts entries a copy materialisation left out back into a scanned root: a device node
 * whose name is still free in its (still existing) directory, and the setuid/setgid bits
 * of a file whose content and other mode bits are unchanged (as the kernel clears them on
 * a write), and the xattrs left out (file capabilities; `trusted.*`/`security.*` without
 * root) of an entry of the same type whose content is unchanged and that does not carry
 * them now. Returns `scanned` itself when there is nothing to put back.
 */
export async function restoreLeftOut(
  src: ContentReader,
  writer: ContentWriter,
  scanned: Digest,
  base: Map<string, Entry>,
  leftOut: { path: string; reason: string }[] | undefined,
): Promise<Digest> {
  const wanted = new Map<string, Entry>();
  const reasons = new Map<string, Set<string>>();
  const xattrsOut = new Map<string, (name: string) => boolean>(); // path → which of the base's xattrs were left out
  for (const l of leftOut ?? []) {
    const e = base.get(l.path);
    if (e) reasons.set(l.path, (reasons.get(l.path) ?? new Set()).add(l.reason));
    if (e && (l.reason === LEFT_OUT_DEVICE || l.reason === LEFT_OUT_SETID)) wanted.set(l.path, e);
    if (e && (l.reason === LEFT_OUT_CAPABILITY || l.reason === LEFT_OUT_ROOT_XATTRS)) {
      const before = xattrsOut.get(l.path);
      const mine =
        l.reason === LEFT_OUT_CAPABILITY ? isPrivilegeXattr : (n: string) => n.startsWith('trusted.') || n.startsWith('security.');
      xattrsOut.set(l.path, before ? (n) => before(n) || mine(n) : mine);
      wanted.set(l.path, e);
    }
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
      }
      const leftXattrs = xattrsOut.get(p);
      if (b && leftXattrs && e.type === b.type && e.type !== 'hardlink' && b.type !== 'hardlink' && sameContent(e, b)) {
        const back = Object.entries(b.xattrs ?? {}).filter(([n]) => leftXattrs(n) && e.xattrs?.[n] === undefined);
        if (back.length > 0) {
          entries[i] = { ...entries[i]!, xattrs: { ...(e.xattrs ?? {}), ...Object.fromEntries(back) } } as Entry;
          changed = true;
        }
      }
      const now = entries[i]!;
      if (
        reasons.get(p)?.has(LEFT_OUT_SETID) &&
        b?.type === 'file' &&
        now.type === 'file' &&
        now.digest === b.digest &&
        (now.mode & ~0o6000) === (b.mode & ~0o6000) &&
        now.mode !== b.mode
      ) {
        entries[i] = { ...now, mode: b.mode };
        changed = true;
      }
    }
    for (const [p, b] of wanted) {
      const slash = p.lastIndexOf('/');
      if ((slash < 0 ? '' : p.slice(0, slash)) !== rel || (b.type !== 'chardev' && b.type !== 'blockdev')) continue;
      if (!reasons.get(p)?.has(LEFT_OUT_DEVICE)) continue;
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

/** Whether two entries of one type hold the same content (a file's digest, a directory's tree, a target, an rdev). */
function sameContent(a: Entry, b: Entry): boolean {
  if (a.type === 'file' && b.type === 'file') return a.digest === b.digest;
  if (a.type === 'dir' && b.type === 'dir') return true;
  if (a.type === 'symlink' && b.type === 'symlink') return a.target === b.target;
  if ((a.type === 'fifo' || a.type === 'chardev' || a.type === 'blockdev') && a.type === b.type) return a.rdev === b.rdev;
  return false;
}
