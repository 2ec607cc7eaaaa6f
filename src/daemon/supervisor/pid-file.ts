import { readFileSync } from 'node:fs';

/** The pid in a daemon pid file when that process is alive (not a zombie), else undefined. */
export function livePid(pidFile: string): number | undefined {
  let pid: number;
  try {
    pid = Number(readFileSync(pidFile, 'utf8').trim());
  } catch {
    return undefined;
  }
  if (!Number.isInteger(pid) || pid <= 0) return undefined;
  try {
    process.kill(pid, 0);
  } catch {
    return undefined;
  }
  // a zombie (killed, not reaped yet) is gone for every purpose here
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    if (stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) === 'Z') return undefined;
  } catch {
    return undefined;
  }
  return pid;
}
