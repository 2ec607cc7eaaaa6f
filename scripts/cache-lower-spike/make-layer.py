#!/usr/bin/env python3
"""Spike helper (docs/explanation/host-cache-lower.md): build an AWC-style layer of TREE.

    make-layer.py TREE LAYER CACHE

LAYER gets TREE's directories and symlinks, and for each non-empty regular file a
metadata-only placeholder (sparse, the file's size, mode, owner, mtime) with
trusted.overlay.metacopy and trusted.overlay.redirect=/<short name>, the short name being
23 base64url characters of the file's SHA-256 (as src/core/content-name.ts). CACHE gets one
copy of each distinct content under its short name, 0600, written tmp + rename, in walk
order. Empty files are plain empty files. Hardlinks are not kept (a spike).
"""
import base64, hashlib, os, shutil, sys

tree, layer, cache = sys.argv[1:4]
os.makedirs(cache, mode=0o700, exist_ok=True)
seen = set()
files = 0
for root, dirs, names in os.walk(tree):
    rel = os.path.relpath(root, tree)
    out = os.path.join(layer, rel) if rel != '.' else layer
    os.makedirs(out, exist_ok=True)
    for n in sorted(dirs) + sorted(names):
        src = os.path.join(root, n)
        dst = os.path.join(out, n)
        st = os.lstat(src)
        if os.path.islink(src):
            os.symlink(os.readlink(src), dst)
            os.lchown(dst, st.st_uid, st.st_gid)
            continue
        if n in dirs:
            continue  # made when walked
        if not os.path.isfile(src):
            continue
        if st.st_size == 0:
            open(dst, 'wb').close()
        else:
            h = hashlib.sha256()
            with open(src, 'rb') as f:
                for b in iter(lambda: f.read(1 << 20), b''):
                    h.update(b)
            short = base64.urlsafe_b64encode(h.digest()).decode()[:23]
            with open(dst, 'wb') as f:
                f.truncate(st.st_size)
            os.setxattr(dst, 'trusted.overlay.metacopy', b'')
            os.setxattr(dst, 'trusted.overlay.redirect', ('/' + short).encode())
            if short not in seen:
                seen.add(short)
                tmp = os.path.join(cache, '.tmp.' + short)
                shutil.copyfile(src, tmp)
                os.chmod(tmp, 0o600)
                os.rename(tmp, os.path.join(cache, short))
        os.chown(dst, st.st_uid, st.st_gid)
        os.chmod(dst, st.st_mode & 0o7777)
        os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
        files += 1
print(f'{files} files, {len(seen)} distinct contents')
