import { readFileSync } from 'node:fs';

/**
 * The host's mounts at or under `under` (a test's own directory), without their ids, sorted:
 * what another process outside a namespace sees there. Mounts elsewhere (other work on the
 * machine) are left out, so they cannot fail a test.
 */
export function mountTable(under: string): string[] {
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => l.split(' '))
    .filter((f) => f[4] === under || f[4]?.startsWith(`${under}/`))
    .map((f) => f.slice(4).join(' '))
    .sort();
}

/** The file system type mounted at `path` (the first mount there that /proc/self/mountinfo lists), or undefined. */
export function fsTypeAt(path: string): string | undefined {
  for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const f = line.split(' ');
    if (f[4] === path) return f[f.indexOf('-') + 1];
  }
  return undefined;
}
