#!/bin/bash
# Spike (docs/explanation/host-cache-lower.md): how overlayfs treats a second data-only lower,
# lowerdir=LAYER::CACHE::CONTENT, when CACHE changes under a live mount. Questions 1-4.
# CONTENT is a plain directory standing in for the content FUSE mount; CACHE is a directory on
# its own small ext4 file system (a loop image) so that df shows when an unlinked file's blocks
# are really freed. Every file exists in two versions of the same size: "content:X" in
# CONTENT, "cache:X" (or "cach2:X") in CACHE, so a read says where its data came from.
# Run as root. Usage: behaviour.sh [WORKDIR]   (default /var/tmp/awc-cachelower/beh)
set -u
DMESG0=$(dmesg | wc -l)
W=${1:-/var/tmp/awc-cachelower/beh}
umount "$W/mnt" 2>/dev/null; umount "$W/cachefs" 2>/dev/null
rm -rf "$W"; mkdir -p "$W"/{layer,content,upper,work,mnt,cachefs}
truncate -s 512M "$W/cache.img"; mkfs.ext4 -q -F "$W/cache.img"
mount -o loop,nosuid,nodev "$W/cache.img" "$W/cachefs"
C=$W/cachefs/c; mkdir -m 0700 "$C"
L=$W/layer; D=$W/content; M=$W/mnt
SMALL=4096; BIG=$((64 << 20))

body() { # TAG NAME SIZE -> stdout: "TAG:NAME" then zeros up to SIZE
  printf '%s:%s' "$1" "$2"; head -c $(($3 - ${#1} - ${#2} - 1)) /dev/zero; }
content() { body content "$1" "${2:-$SMALL}" > "$D/$1"; }
cache() { # NAME [SIZE [TAG]]: written as tmp + rename, as the host would
  body "${3:-cache}" "$1" "${2:-$SMALL}" > "$C/.tmp.$1"; chmod 0600 "$C/.tmp.$1"; mv -f "$C/.tmp.$1" "$C/$1"; }
placeholder() { # NAME [SIZE]
  : > "$L/$1"; truncate -s "${2:-$SMALL}" "$L/$1"
  setfattr -n trusted.overlay.metacopy "$L/$1"; setfattr -n trusted.overlay.redirect -v "/$1" "$L/$1"; }
rd() { # NAME [FD]: what a new open (or pread on FD) of the workspace's file returns
  python3 - "$M/$1" "${2:-}" <<'PY'
import errno, os, sys
try:
    fd = int(sys.argv[2]) if sys.argv[2] else os.open(sys.argv[1], os.O_RDONLY)
    b = os.pread(fd, 16, 0).split(b'\0')[0].decode()
    print(b if b else '(zeros)')
except OSError as e:
    print('ERROR', errno.errorcode[e.errno], e.strerror)
PY
}
show() { printf '  %-58s %s\n' "$1" "$2"; }
used() { df --output=used -B1M "$W/cachefs" | tail -1 | tr -d ' '; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }

# content of every name; placeholders for every name
for n in I J K A B B2 C X D E F G G2 H H2; do
  case $n in E) content $n $BIG; placeholder $n $BIG ;; G|G2|K) placeholder $n ;; *) content $n; placeholder $n ;; esac
done
# CACHE at mount time: I K (Q1), D E F G G2 (Q3), H H2 (Q4)
for n in I K D F G G2 H H2; do cache $n; done; cache E $BIG

echo "== kernel $(uname -r)"
echo "== 1. mount syntax: lowerdir=LAYER::CACHE::CONTENT,metacopy=on,redirect_dir=on"
if ! mount -t overlay overlay -o "nodev,nosuid,lowerdir=$L::$C::$D,upperdir=$W/upper,workdir=$W/work,metacopy=on,redirect_dir=on" "$M"; then
  echo "  mount FAILED: $(dmesg | tail -3)"; exit 1; fi
show "mount" "ok: $(grep " $M " /proc/mounts | cut -d' ' -f4 | tr ',' '\n' | grep -E 'lowerdir|datadir|metacopy|redirect' | tr '\n' ' ')"
show "I in CACHE and CONTENT" "$(rd I)"
show "J only in CONTENT" "$(rd J)"
show "K only in CACHE" "$(rd K)"

echo "== 2. a file added to CACHE (tmp + rename) after the mount"
rd B > /dev/null; exec 5< "$M/B2"; stat "$M/C" > /dev/null; chmod 0600 "$M/X"
show "before: B read (closed), B2 open, C stat'd, X chmod'd, A untouched" "B=$(rd B) B2=$(rd B2 5)"
show "st_blocks of A/C before the add" "$(stat -c %b "$M/A")/$(stat -c %b "$M/C")"
for n in A B B2 C X; do cache $n; done
show "A (never looked up)" "$(rd A)"
show "C (stat'd before, data never opened)" "$(rd C)"
show "X (metadata copied up by chmod, data never opened)" "$(rd X)"
show "B (data read before the add, closed)" "$(rd B)"
show "B2 on its open fd" "$(rd B2 5)"
show "B2 new open while the fd is held" "$(rd B2)"
drop
show "after drop_caches: B" "$(rd B)"
show "after drop_caches: B2 new open (fd still held)" "$(rd B2)"
exec 5<&-; drop
show "after closing B2's fd and drop_caches: B2" "$(rd B2)"

echo "== 3. a file removed from CACHE under the mount"
exec 6< "$M/D"; rd D 6 > /dev/null; rd E > /dev/null; rd G2 > /dev/null
show "before: D open (fd 6), E (64 MiB) and G2 read and closed" "D=$(rd D 6) E=$(rd E) G2=$(rd G2); cache fs used $(used) MiB"
for n in D E F G G2; do rm "$C/$n"; done; sync
show "cache fs used after rm of D E F G G2" "$(used) MiB"
show "D on its open fd" "$(rd D 6)"
show "D new open" "$(rd D)"
show "E (resolved before, closed) new open" "$(rd E)"
show "F (never opened, still in CONTENT)" "$(rd F)"
show "G (never opened, in no lower)" "$(rd G)"
show "G2 (resolved before, in no other lower)" "$(rd G2)"
drop
show "after drop_caches: D on its fd / D new open" "$(rd D 6) / $(rd D)"
show "after drop_caches: E / G2" "$(rd E) / $(rd G2); cache fs used $(used) MiB"
exec 6<&-; drop
show "after closing D's fd and drop_caches: D / G2" "$(rd D) / $(rd G2); used $(used) MiB"

echo "== 4. a file in CACHE replaced (rename over) under the mount"
exec 7< "$M/H"; rd H > /dev/null
show "before: H read, fd 7 held; H2 untouched" "H=$(rd H)"
cache H $SMALL cach2; cache H2 $SMALL cach2
show "H on its open fd" "$(rd H 7)"
show "H new open (resolved before)" "$(rd H)"
show "H2 (never opened)" "$(rd H2)"
drop
show "after drop_caches, fd 7 still held: H new open" "$(rd H)"
exec 7<&-; drop
show "after closing fd 7 and drop_caches: H" "$(rd H)"

echo "== 5. a CACHE file shorter than its placeholder (what a torn or partial fill would serve)"
placeholder Q; cache Q 100
show "Q: placeholder 4096 bytes, CACHE file 100 bytes: stat size / bytes read" "$(stat -c %s "$M/Q") / $(cat "$M/Q" | wc -c)"

echo "== 6. what the host sees of reads served from CACHE (for recency)"
placeholder P; content P; cache P; touch -a -d 2000-01-01 "$C/P"
python3 - "$C" > "$W/inotify.out" <<'PY' &
import ctypes, os, select, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(0); libc.inotify_add_watch(fd, sys.argv[1].encode(), 0x1 | 0x20 | 0x10 | 0x8)
names = {0x1: 'ACCESS', 0x20: 'OPEN', 0x10: 'CLOSE_NOWRITE', 0x8: 'CLOSE_WRITE'}
end = time.time() + 3
while time.time() < end:
    if select.select([fd], [], [], 0.2)[0]:
        buf = os.read(fd, 4096); i = 0
        while i < len(buf):
            wd, mask, cookie, ln = struct.unpack_from('iIII', buf, i)
            name = buf[i + 16:i + 16 + ln].split(b'\0')[0].decode()
            print(name, '|'.join(v for k, v in names.items() if mask & k)); i += 16 + ln
PY
sleep 1; rd P > /dev/null; wait
show "P read through the mount: CACHE file's atime (set to 2000-01-01)" "$(stat -c %x "$C/P" | cut -c1-19)"
show "inotify events on CACHE during that read" "$(tr '\n' ';' < "$W/inotify.out")"

echo "== mount-time negative lookups: a name added to CACHE after a failed lookup through the mount"
umount "$M"; rm -rf "$W/upper" "$W/work"; mkdir "$W/upper" "$W/work"
mount -t overlay overlay -o "nodev,nosuid,lowerdir=$L::$C::$D,upperdir=$W/upper,workdir=$W/work,metacopy=on,redirect_dir=on" "$M"
show "G after remount (in no lower)" "$(rd G)"
cache G
show "G after it is added to CACHE" "$(rd G)"
umount "$M"; umount "$W/cachefs"
echo "== dmesg (overlayfs lowerdata lines during the run; the kernel is shared)"
dmesg | tail -n +$((DMESG0 + 1)) | grep -i "overlayfs: lazy" | tail -10
