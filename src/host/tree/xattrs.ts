import type * as Xattr from 'fs-xattr';
import { lazyRequire } from '../../core/lazy-require.js';
import { toAwcError } from '../../core/errors.js';

/** fs-xattr (a native addon), loaded on first use. */
const xattr = lazyRequire<typeof Xattr>('fs-xattr');

/**
 * Which extended attributes a tree records (docs/reference/formats.md, "xattrs";
 * docs/decisions.md, "Xattrs of every namespace are recorded"): every namespace the file
 * system exposes (`user.*`, `security.*` such as `security.capability`,
 * `system.posix_acl_access` / `system.posix_acl_default` that carry ACLs, `trusted.*`),
 * except overlayfs's own bookkeeping, `trusted.overlay.*`, which AWC's mounts use
 * (redirects, metacopy and opaque marks, origins) and which a checkpoint must never
 * record. `user.overlay.*` is ordinary user data: AWC's overlays use the `trusted.`
 * namespace, where the kernel treats `user.overlay.*` as any other xattr.
 */

/** Prefix of the xattrs that belong to AWC's overlay mounts and are never recorded. */
export const OVERLAY_XATTR_PREFIX = 'trusted.overlay.';

/** What to do with an xattr by name: record it, or drop it silently (`trusted.overlay.*`). */
export function classifyXattr(name: string): 'keep' | 'drop' {
  return name.startsWith(OVERLAY_XATTR_PREFIX) ? 'drop' : 'keep';
}

/**
 * The xattrs that grant privileges as a setuid bit does (file capabilities): left out where
 * no `nosuid` mount keeps them inert, as setuid bits are (docs/explanation/security.md).
 */
export function isPrivilegeXattr(name: string): boolean {
  return name === 'security.capability';
}

/**
 * Reads the recordable xattrs (every namespace but `trusted.overlay.*`) of the object at
 * `objPath`, a descriptor path (`fdPath(fd)`, src/core/dir-fd.ts) of a file or directory
 * (never a name that could be a symlink): name → base64 value, undefined when there are none
 * or the file system has no xattrs. An attribute removed between the list and the read is
 * taken as absent.
 * @throws AwcError (E_PERMISSION, …) when the attributes cannot be listed or read
 */
export function readXattrs(objPath: string): Record<string, string> | undefined {
  let names: string[];
  try {
    names = xattr().listAttributesSync(objPath);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOTSUP' || code === 'EOPNOTSUPP') return undefined; // file system without xattrs: nothing to lose
    throw toAwcError(err);
  }
  let out: Record<string, string> | undefined;
  for (const name of names) {
    if (classifyXattr(name) === 'drop') continue;
    let value: Buffer;
    try {
      value = xattr().getAttributeSync(objPath, name);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENODATA') continue; // removed between list and get
      throw toAwcError(err);
    }
    (out ??= {})[name] = value.toString('base64');
  }
  return out;
}
