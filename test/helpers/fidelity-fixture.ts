import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, chownSync, linkSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import type * as Xattr from 'fs-xattr';

const xattr = createRequire(import.meta.url)('fs-xattr') as typeof Xattr;

/** Every byte value, for binary xattr values. */
export const ALL_BYTES = Buffer.from(Array.from({ length: 256 }, (_, i) => i));

/** Sets a nanosecond mtime (and atime) without following a symlink. */
export function touchNs(p: string, ns: bigint): void {
  const s = ns.toString();
  execFileSync('touch', ['-h', '-d', `@${s.slice(0, -9)}.${s.slice(-9)}`, p]);
}

/** `size` deterministic bytes that do not compress or repeat (sha256 in counter mode). */
export function noise(size: number, seed: string): Buffer {
  const out = Buffer.alloc(size);
  for (let off = 0, i = 0; off < size; off += 32, i++)
    createHash('sha256')
      .update(`${seed}:${i}`)
      .digest()
      .copy(out, off, 0, Math.min(32, size - off));
  return out;
}

/** Options of {@link makeFidelityFixture}. */
export interface FixtureOptions {
  /** Bytes of the file with three names (default 100 MB). */
  bigSize?: number;
}

/**
 * Writes the fidelity fixture of issue 12 into `root` (an empty directory), as root:
 * modes 755/600/000, a 750 directory, setuid/setgid/sticky with other owners (1234:5678),
 * empty files and an empty directory, symlinks (self-loop, `..`, absolute, dangling, a cycle
 * through a hardlinked symlink), a file with three names, a fifo, a socket, char and block
 * devices, xattrs of every namespace with binary values (user.*, security.capability set
 * with setcap, ACLs with setfacl, trusted.*), `user.overlay.*` xattrs and `.wh.` names as
 * user data, and distinct nanosecond mtimes on everything, directories set after their
 * children. Returns the paths the fixture leaves out of a snapshot by design (the socket)
 * and the groups of names that are one inode in the source but not in a snapshot (a
 * hardlinked symlink is recorded as independent symlinks, W_HARDLINK_COPIED).
 */
export function makeFidelityFixture(root: string, opts: FixtureOptions = {}): { skipped: string[]; symlinkLinks: string[][] } {
  const p = (rel: string): string => join(root, rel);
  for (const d of [
    'modes',
    'modes/d750',
    'owners',
    'empty-dir',
    'links',
    'links/deep/er',
    'hard',
    'hard/sub',
    'special',
    'xattrs',
    'ovl/.wh..wh..opq',
    'ovl/dir',
  ])
    mkdirSync(p(d), { recursive: true });
  // modes
  writeFileSync(p('modes/m755'), '#!/bin/sh\necho 755\n');
  chmodSync(p('modes/m755'), 0o755);
  writeFileSync(p('modes/m600'), 'six hundred\n');
  chmodSync(p('modes/m600'), 0o600);
  writeFileSync(p('modes/m000'), 'nobody may read\n');
  chmodSync(p('modes/m000'), 0o000);
  writeFileSync(p('modes/d750/inside'), 'in a 750 dir\n');
  chmodSync(p('modes/d750'), 0o750);
  // owners and setuid/setgid/sticky (chown first: it clears the bits)
  writeFileSync(p('owners/setuid'), 'suid\n');
  chownSync(p('owners/setuid'), 1234, 5678);
  chmodSync(p('owners/setuid'), 0o4755);
  writeFileSync(p('owners/setgid'), 'sgid\n');
  chownSync(p('owners/setgid'), 0, 5678);
  chmodSync(p('owners/setgid'), 0o2711);
  writeFileSync(p('owners/plain'), 'owned by 1234:5678\n');
  chownSync(p('owners/plain'), 1234, 5678);
  mkdirSync(p('owners/sticky'));
  writeFileSync(p('owners/sticky/in'), 'x');
  chownSync(p('owners/sticky'), 1234, 5678);
  chmodSync(p('owners/sticky'), 0o1777);
  mkdirSync(p('owners/sgid-dir'));
  chownSync(p('owners/sgid-dir'), 1234, 5678);
  chmodSync(p('owners/sgid-dir'), 0o2775);
  // empty files (two inodes) and an empty directory
  writeFileSync(p('empty-a'), '');
  writeFileSync(p('empty-b'), '');
  chmodSync(p('empty-dir'), 0o705);
  // symlinks
  symlinkSync('self', p('links/self'));
  symlinkSync('..', p('links/up'));
  symlinkSync('../../..', p('links/deep/er/way-up'));
  symlinkSync('/etc/passwd', p('links/absolute'));
  symlinkSync('no/such/thing', p('links/dangling'));
  symlinkSync('cycle-b', p('links/cycle-a'));
  symlinkSync('cycle-a', p('links/cycle-b'));
  linkSync(p('links/cycle-a'), p('links/cycle-a-again')); // link(2) names the symlink itself
  symlinkSync('../modes/m600', p('links/to-file'));
  // hardlinks: three names of one big file, and a small group
  writeFileSync(p('hard/big'), noise(opts.bigSize ?? 100_000_000, 'big'));
  linkSync(p('hard/big'), p('hard/big-2'));
  linkSync(p('hard/big'), p('hard/sub/big-3'));
  // special files
  execFileSync('mkfifo', ['-m', '640', p('special/fifo')]);
  execFileSync('python3', ['-c', 'import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])', p('special/sock')]);
  execFileSync('mknod', ['-m', '620', p('special/null-like'), 'c', '1', '3']);
  execFileSync('mknod', ['-m', '660', p('special/block'), 'b', '7', '200']);
  chownSync(p('special/block'), 0, 6);
  // xattrs of every namespace, binary values
  writeFileSync(p('xattrs/user'), 'user xattrs\n');
  xattr.setAttributeSync(p('xattrs/user'), 'user.binary', ALL_BYTES);
  xattr.setAttributeSync(p('xattrs/user'), 'user.empty', Buffer.alloc(0));
  xattr.setAttributeSync(p('xattrs/user'), 'user.text', 'kept');
  execFileSync('cp', ['/bin/true', p('xattrs/cap-exe')]);
  execFileSync('setcap', ['cap_net_raw,cap_net_admin+ep', p('xattrs/cap-exe')]);
  writeFileSync(p('xattrs/acl'), 'acl\n');
  execFileSync('setfacl', ['-m', 'u:1234:rwx,g:5678:r', p('xattrs/acl')]);
  mkdirSync(p('xattrs/acl-dir'));
  execFileSync('setfacl', ['-m', 'u:1234:rx', '-d', '-m', 'g:5678:rwx', p('xattrs/acl-dir')]);
  writeFileSync(p('xattrs/trusted'), 'trusted\n');
  xattr.setAttributeSync(p('xattrs/trusted'), 'trusted.awc-test', ALL_BYTES.subarray(0, 17));
  xattr.setAttributeSync(p('xattrs'), 'user.on-a-dir', Buffer.from([0, 1, 2, 0xff]));
  // overlay-looking user data: ordinary data
  xattr.setAttributeSync(p('ovl/dir'), 'user.overlay.opaque', 'y');
  writeFileSync(p('ovl/dir/.wh.gone'), 'a file named like a whiteout\n');
  writeFileSync(p('ovl/.wh.top'), '');
  xattr.setAttributeSync(p('ovl/.wh.top'), 'user.overlay.redirect', '/nowhere');
  // nanosecond mtimes, children before parents
  let ns = 1_650_000_000_000_000_001n;
  const stamp = (rel: string): void => touchNs(p(rel), (ns += 1_000_000_123n));
  for (const f of [
    'modes/m755',
    'modes/m600',
    'modes/m000',
    'modes/d750/inside',
    'modes/d750',
    'modes',
    'owners/setuid',
    'owners/setgid',
    'owners/plain',
    'owners/sticky/in',
    'owners/sticky',
    'owners/sgid-dir',
    'owners',
    'empty-a',
    'empty-b',
    'empty-dir',
    'links/self',
    'links/up',
    'links/deep/er/way-up',
    'links/deep/er',
    'links/deep',
    'links/absolute',
    'links/dangling',
    'links/cycle-a',
    'links/cycle-b',
    'links/to-file',
    'links',
    'hard/big',
    'hard/sub',
    'hard',
    'special/fifo',
    'special/null-like',
    'special/block',
    'special',
    'xattrs/user',
    'xattrs/cap-exe',
    'xattrs/acl',
    'xattrs/acl-dir',
    'xattrs/trusted',
    'xattrs',
    'ovl/dir/.wh.gone',
    'ovl/dir',
    'ovl/.wh.top',
    'ovl/.wh..wh..opq',
    'ovl',
  ])
    stamp(f);
  touchNs(root, (ns += 7n));
  return { skipped: ['special/sock'], symlinkLinks: [['links/cycle-a', 'links/cycle-a-again']] };
}
