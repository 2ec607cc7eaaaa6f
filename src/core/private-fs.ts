import * as fs from 'node:fs';
import { chmod, mkdir, open, rename } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';

/**
 * Creating what lives under the AWC home so that no other local user can read it: every
 * directory 0700, every file 0600, set explicitly (chmod/fchmod) so the process umask does
 * not matter. See docs/explanation/security.md.
 */

/** Mode of every directory AWC creates under its home. */
export const PRIVATE_DIR_MODE = 0o700;
/** Mode of every file AWC creates under its home. */
export const PRIVATE_FILE_MODE = 0o600;

/** The directories `mkdir -p path` creates, given the first one it created (outermost first). */
function createdChain(path: string, first: string | undefined): string[] {
  if (first === undefined) return [];
  const top = resolve(first);
  const out: string[] = [];
  for (let p = resolve(path); ; p = dirname(p)) {
    out.unshift(p);
    if (p === top || dirname(p) === p) break;
  }
  return out;
}

/**
 * `mkdir -p` where every directory created is mode 0700 (whatever the umask). Directories
 * that already exist are left as they are.
 * @throws the fs error (callers map it)
 */
export async function mkdirPrivate(path: string): Promise<void> {
  const first = await mkdir(path, { recursive: true, mode: PRIVATE_DIR_MODE });
  for (const d of createdChain(path, first)) await chmod(d, PRIVATE_DIR_MODE);
}

/** Synchronous {@link mkdirPrivate}. */
export function mkdirPrivateSync(path: string): void {
  const first = fs.mkdirSync(path, { recursive: true, mode: PRIVATE_DIR_MODE });
  for (const d of createdChain(path, first)) fs.chmodSync(d, PRIVATE_DIR_MODE);
}

/**
 * Writes `data` to `path` (created or truncated) as a 0600 file; never follows a symlink
 * at `path` (ELOOP).
 * @throws the fs error
 */
export async function writeFilePrivate(path: string, data: string | Uint8Array): Promise<void> {
  const c = fs.constants;
  const fh = await open(path, c.O_WRONLY | c.O_CREAT | c.O_TRUNC | c.O_NOFOLLOW, PRIVATE_FILE_MODE);
  try {
    await fh.chmod(PRIVATE_FILE_MODE);
    await fh.writeFile(data);
  } finally {
    await fh.close();
  }
}

/**
 * Replaces `path` atomically with a 0600 file holding `data`: written to `<path>.tmp`
 * ({@link writeFilePrivate}), then renamed over `path`, so a reader sees the old or the new
 * content, never a part.
 * @throws the fs error
 */
export async function replaceFilePrivate(path: string, data: string | Uint8Array): Promise<void> {
  const tmp = `${path}.tmp`;
  await writeFilePrivate(tmp, data);
  await rename(tmp, path);
}

/** Synchronous {@link replaceFilePrivate}. */
export function replaceFilePrivateSync(path: string, data: string | Uint8Array): void {
  const c = fs.constants;
  const tmp = `${path}.tmp`;
  const fd = fs.openSync(tmp, c.O_WRONLY | c.O_CREAT | c.O_TRUNC | c.O_NOFOLLOW, PRIVATE_FILE_MODE);
  try {
    fs.fchmodSync(fd, PRIVATE_FILE_MODE);
    fs.writeFileSync(fd, data);
  } finally {
    fs.closeSync(fd);
  }
  fs.renameSync(tmp, path);
}

/**
 * Opens `path` for appending as a 0600 file (created when missing, tightened when it
 * exists); never follows a symlink. Returns the descriptor.
 * @throws the fs error
 */
export function openPrivateAppendSync(path: string): number {
  const c = fs.constants;
  const fd = fs.openSync(path, c.O_WRONLY | c.O_CREAT | c.O_APPEND | c.O_NOFOLLOW, PRIVATE_FILE_MODE);
  try {
    fs.fchmodSync(fd, PRIVATE_FILE_MODE);
  } catch (err) {
    fs.closeSync(fd);
    throw err;
  }
  return fd;
}

/**
 * Creates `path` as an empty 0600 file when it does not exist (an existing file is left
 * as is); never follows a symlink.
 * @throws the fs error
 */
export function touchPrivateSync(path: string): void {
  const c = fs.constants;
  fs.closeSync(fs.openSync(path, c.O_WRONLY | c.O_CREAT | c.O_NOFOLLOW, PRIVATE_FILE_MODE));
}
