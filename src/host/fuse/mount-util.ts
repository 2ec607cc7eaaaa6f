/**
 * Small helpers around mounting: /proc/self/mountinfo parsing, running mount/umount
 * asynchronously, the fusectl connection directory.
 *
 * Nothing here reads through a FUSE mount: the daemon's event loop serves those mounts, so a
 * synchronous stat of a mount point could deadlock. Mount state is read from mountinfo only.
 */
import { spawn, spawnSync, type StdioOptions } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';

/** One line of /proc/self/mountinfo. */
export interface MountInfo {
  mountId: number;
  parentId: number;
  /** Device number of the mounted filesystem. */
  major: number;
  minor: number;
  /** Mount point, unescaped. */
  mountPoint: string;
  /** Filesystem type, e.g. `fuse.awc`, `overlay`. */
  fsType: string;
  /** Mount source, unescaped. */
  source: string;
  /** Per-superblock options (e.g. `rw,lowerdir=...` for overlay). */
  superOptions: string;
}

/** Undoes the octal escaping of mountinfo fields (`\040` for space, `\011`, `\012`, `\134`). */
export function unescapeMountField(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
}

/** Parses /proc/self/mountinfo (or the given text). */
export function readMountInfo(text?: string): MountInfo[] {
  const src = text ?? readFileSync('/proc/self/mountinfo', 'latin1');
  const out: MountInfo[] = [];
  for (const line of src.split('\n')) {
    if (!line) continue;
    const f = line.split(' ');
    const sep = f.indexOf('-', 6);
    if (sep < 0 || f.length < sep + 3) continue;
    const [maj, min] = f[2]!.split(':');
    out.push({
      mountId: Number(f[0]),
      parentId: Number(f[1]),
      major: Number(maj),
      minor: Number(min),
      mountPoint: unescapeMountField(f[4]!),
      fsType: f[sep + 1]!,
      source: unescapeMountField(f[sep + 2]!),
      superOptions: f[sep + 3] ?? '',
    });
  }
  return out;
}

/** Mounts at exactly `mountPoint` (absolute, resolved), optionally of one type; last = topmost. */
export function mountsAt(mountPoint: string, fsType?: string, text?: string): MountInfo[] {
  return readMountInfo(text).filter((m) => m.mountPoint === mountPoint && (fsType === undefined || m.fsType === fsType));
}

/** Result of a command run by {@link runCommand}. */
export interface CommandResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs a command asynchronously (never spawnSync: mount(2) and umount(2) may wait on replies
 * that this very process must send). `extraFds` become the child's fds 3, 4, …; `env`
 * defaults to this process's environment.
 */
export function runCommand(
  cmd: string,
  args: string[],
  extraFds: number[] = [],
  timeoutMs = 30_000,
  env?: NodeJS.ProcessEnv,
): Promise<CommandResult> {
  return new Promise((resolve) => {
    const stdio: StdioOptions = ['ignore', 'pipe', 'pipe', ...extraFds];
    let stdout = '';
    let stderr = '';
    let settled = false;
    const child = spawn(cmd, args, { stdio, env: env ?? process.env });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.stdout?.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr?.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const done = (r: CommandResult): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(r);
    };
    child.on('error', (err) => done({ code: null, signal: null, stdout, stderr: stderr + String(err) }));
    child.on('close', (code, signal) => done({ code, signal, stdout, stderr }));
  });
}

/** Where the kernel's fusectl filesystem exposes one directory per FUSE connection. */
export const FUSECTL_DIR = '/sys/fs/fuse/connections';

/**
 * Makes sure fusectl is mounted at /sys/fs/fuse/connections (systemd usually does it; minimal
 * containers and VMs often do not). Synchronous spawn is safe here: fusectl never calls us.
 * Returns whether the connections directory is usable.
 */
export function ensureFusectl(): boolean {
  if (readMountInfo().some((m) => m.fsType === 'fusectl' && m.mountPoint === FUSECTL_DIR)) return true;
  if (!existsSync(FUSECTL_DIR)) return false;
  const r = spawnSync('mount', ['-t', 'fusectl', 'fusectl', FUSECTL_DIR], { stdio: 'ignore' });
  return r.status === 0;
}

/**
 * Aborts a FUSE connection through fusectl: every pending and future request fails
 * (ENOTCONN for callers), and the server's blocked device reads return ENODEV.
 * Returns false when the connection directory does not exist (already gone, or no fusectl).
 */
export function abortFuseConnection(connectionId: number): boolean {
  try {
    writeFileSync(`${FUSECTL_DIR}/${connectionId}/abort`, '1');
    return true;
  } catch {
    return false;
  }
}
