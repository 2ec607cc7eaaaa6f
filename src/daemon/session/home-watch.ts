import { statSync } from 'node:fs';

/** How often the daemon looks whether its home still exists (ms). */
export const HOME_WATCH_MS = 5_000;

/**
 * Calls `onGone` once when the directory `home` is removed or replaced (ENOENT, or another
 * inode at the path), looked at every `intervalMs` (an unref'd timer: it never keeps the process
 * alive). A daemon whose home is gone serves nothing anyone can reach any more (its catalog and
 * its uppers were in it), so it stops instead of running on for ever. Other stat errors (EACCES,
 * EIO) are not taken for a removal. Returns the function that stops watching.
 */
export function watchHome(home: string, onGone: () => Promise<void> | void, intervalMs = HOME_WATCH_MS): () => void {
  const ino = (): bigint | 'gone' | undefined => {
    try {
      return statSync(home, { bigint: true }).ino;
    } catch (err) {
      return (err as NodeJS.ErrnoException).code === 'ENOENT' ? 'gone' : undefined;
    }
  };
  const first = ino();
  const timer = setInterval(() => {
    const now = ino();
    if (now === undefined || now === first) return;
    clearInterval(timer);
    void Promise.resolve()
      .then(onGone)
      .catch(() => undefined);
  }, intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}
