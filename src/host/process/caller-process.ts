import { readFileSync, writeFileSync } from 'node:fs';
import { getPriority } from 'node:os';
import { AwcError } from '../../core/errors.js';
import { processDifference, statusOf } from './peer-process.js';

/** What a command root starts for a caller takes of it (docs/explanation/stable-paths.md). */
export interface CallerProfile {
  uid: number;
  gid: number;
  /** Supplementary groups. */
  groups: number[];
  /** Soft and hard value of every RLIMIT, by resource number 0–15, as decimal strings (unlimited: 2^64 − 1). */
  limits: [string, string][];
  /** Its nice value. */
  nice: number;
}

/** The lines of /proc/<pid>/limits, by resource number (linux/resource.h). */
const LIMIT_NAMES = [
  'Max cpu time',
  'Max file size',
  'Max data size',
  'Max stack size',
  'Max core file size',
  'Max resident set',
  'Max processes',
  'Max open files',
  'Max locked memory',
  'Max address space',
  'Max file locks',
  'Max pending signals',
  'Max msgqueue size',
  'Max nice priority',
  'Max realtime priority',
  'Max realtime timeout',
];
const UNLIMITED = '18446744073709551615';

/**
 * What confines process `pid` that a process root starts for it would escape: another
 * namespace or root directory, a seccomp filter, no_new_privs (which Landlock and an
 * unprivileged seccomp filter need: Landlock itself shows nowhere in /proc), a tracer (a
 * ptrace sandbox), another LSM label. Its identity may differ; the cgroup, the resource limits
 * and no_new_privs are given to what is started (joinCgroups, the stage's limits, setpriv).
 * Returns the first difference's name, or undefined when there is none ('unreadable' when
 * its /proc cannot be read).
 */
export function sandboxDifference(pid: number): string | undefined {
  return processDifference(pid, { statusFields: ['Seccomp', 'NoNewPrivs'], cgroup: false });
}

/**
 * Who process `pid` is and what limits it runs under: real uid and gid (which must equal the
 * effective, saved and filesystem ones: a setuid program's descriptors are not its caller's
 * to hand on), groups, every resource limit (/proc/<pid>/limits, readable without
 * CAP_SYS_RESOURCE) and its nice value. Read by pid: trust it only while a pidfd of the
 * process says it still runs.
 * @throws E_NOT_FOUND (gone), E_PERMISSION (uids or gids differ)
 */
export function callerProfile(pid: number): CallerProfile {
  let st: Map<string, string>;
  let limitsText: string;
  let nice: number;
  try {
    st = statusOf(pid);
    limitsText = readFileSync(`/proc/${pid}/limits`, 'utf8');
    nice = getPriority(pid);
  } catch {
    throw new AwcError('E_NOT_FOUND', `process ${pid} is gone`);
  }
  const ids = (f: string) => (st.get(f) ?? '').split(/\s+/).filter((x) => x !== '');
  const [uids, gids] = [ids('Uid'), ids('Gid')];
  if (uids.length !== 4 || gids.length !== 4 || new Set(uids).size !== 1 || new Set(gids).size !== 1)
    throw new AwcError('E_PERMISSION', 'the calling process runs with changed ids (a setuid or setgid program)', {
      hint: 'Run `awc run` from your own shell.',
    });
  const limits: [string, string][] = LIMIT_NAMES.map((name) => {
    const line = limitsText.split('\n').find((l) => l.startsWith(`${name} `));
    const v = line
      ?.slice(name.length)
      .trim()
      .split(/\s+/)
      .slice(0, 2)
      .map((x) => (x === 'unlimited' ? UNLIMITED : x));
    if (!v || v.length !== 2 || !v.every((x) => /^\d+$/.test(x))) throw new AwcError('E_NOT_FOUND', `process ${pid}: no "${name}" limit`);
    return [v[0]!, v[1]!];
  });
  return { uid: Number(uids[0]), gid: Number(gids[0]), groups: ids('Groups').map(Number), limits, nice };
}

/** The mount point of each cgroup hierarchy this process sees: `0` for cgroup2, else the v1 hierarchy's controllers (`pids`, `name=systemd`). */
function cgroupMounts(): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const f = line.split(' ');
    const dash = f.indexOf('-');
    if (dash < 0) continue;
    const type = f[dash + 1];
    const point = f[4]!.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
    if (type === 'cgroup2' && !out.has('0')) out.set('0', point);
    if (type !== 'cgroup') continue;
    const opts = (f[dash + 3] ?? '').split(',');
    const known = [
      'name=',
      'cpuset',
      'cpu',
      'cpuacct',
      'blkio',
      'memory',
      'devices',
      'freezer',
      'net_cls',
      'perf_event',
      'net_prio',
      'hugetlb',
      'pids',
      'rdma',
      'misc',
    ];
    const controllers = opts.filter((o) => known.some((k) => (k.endsWith('=') ? o.startsWith(k) : o === k))).sort();
    if (controllers.length > 0 && !out.has(controllers.join(','))) out.set(controllers.join(','), point);
  }
  return out;
}

/** `/proc/<pid>/cgroup` as hierarchy key (as cgroupMounts names it) → path. */
function cgroupsOf(pid: number): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of readFileSync(`/proc/${pid}/cgroup`, 'utf8').split('\n')) {
    const m = /^(\d+):([^:]*):(.*)$/.exec(line);
    if (!m) continue;
    const key = m[1] === '0' ? '0' : m[2]!.split(',').sort().join(',');
    out.set(key, m[3]!);
  }
  return out;
}

/**
 * Moves process `pid` into every cgroup process `of` is in, cgroup v2 and each v1 hierarchy
 * (root writes `pid` to that cgroup's `cgroup.procs`), so what `pid` runs is accounted and
 * limited as `of` is.
 * @throws E_PERMISSION (a hierarchy not mounted here, a path with `..`, a write refused: the
 *   command must not run outside the caller's cgroups), E_NOT_FOUND (a process is gone)
 */
export function joinCgroups(pid: number, of: number): void {
  let theirs: Map<string, string>;
  let mine: Map<string, string>;
  try {
    theirs = cgroupsOf(of);
    mine = cgroupsOf(pid);
  } catch {
    throw new AwcError('E_NOT_FOUND', 'the calling process is gone');
  }
  const mounts = cgroupMounts();
  for (const [key, path] of theirs) {
    if (mine.get(key) === path) continue;
    const mount = mounts.get(key);
    const refuse = (why: string) =>
      new AwcError('E_PERMISSION', `cannot put the command into the caller's cgroup ${key}:${path}: ${why}`, {
        hint: 'awc run starts a command only inside every cgroup its caller is in; ask the administrator about this host’s cgroup layout.',
      });
    if (!mount) throw refuse('that hierarchy is not mounted where the daemon runs');
    if (!path.startsWith('/') || path.split('/').includes('..')) throw refuse('not a cgroup path');
    try {
      writeFileSync(`${mount}${path === '/' ? '' : path}/cgroup.procs`, `${pid}\n`);
    } catch (err) {
      throw refuse((err as NodeJS.ErrnoException).code ?? String(err));
    }
  }
}
