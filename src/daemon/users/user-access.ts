import { execFileSync } from 'node:child_process';
import { AwcError } from '../../core/errors.js';
import { namespaceAllowed, type UserRule } from '../../config/users-config.js';

/** An ordinary user allowed to use the root daemon: who, and the namespace patterns of every rule that names them. */
export interface AllowedUser {
  name: string;
  uid: number;
  gid: number;
  namespaces: string[];
}

/** `getent <db> [key]` lines (NSS: /etc/passwd, /etc/group, LDAP…); none when nothing matches. */
function getent(db: 'passwd' | 'group', key?: string): string[][] {
  try {
    const out = execFileSync('getent', key === undefined ? [db] : [db, key], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
    return out
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => l.split(':'));
  } catch {
    return []; // exit 2: no such entry
  }
}

/**
 * Resolves the `users` rules of the configuration (users-config.ts) into the users they
 * allow, by uid, through NSS (`getent passwd` / `getent group`): a `user` rule names one
 * user (a name or uid); a `group` rule every member of the group and every user whose
 * primary group it is. Root (uid 0) is never in the result (it uses the root socket).
 * @throws E_CONFIG naming a user or group that does not exist, with a hint
 */
export function resolveUserRules(rules: readonly UserRule[]): Map<number, AllowedUser> {
  const out = new Map<number, AllowedUser>();
  let passwd: string[][] | undefined;
  const add = (f: string[] | undefined, namespaces: string[]): void => {
    if (!f) return;
    const uid = Number(f[2]);
    if (!Number.isInteger(uid) || uid === 0) return;
    const u = out.get(uid) ?? { name: f[0]!, uid, gid: Number(f[3]), namespaces: [] };
    u.namespaces.push(...namespaces.filter((n) => !u.namespaces.includes(n)));
    out.set(uid, u);
  };
  for (const r of rules) {
    if (r.user !== undefined) {
      const f = getent('passwd', r.user)[0];
      if (!f)
        throw new AwcError('E_CONFIG', `no user ${JSON.stringify(r.user)} on this host (users in config.json)`, {
          hint: 'Create the user, or remove the entry from "users" in the home\'s config.json.',
        });
      add(f, r.namespaces);
      continue;
    }
    const g = getent('group', r.group)[0];
    if (!g)
      throw new AwcError('E_CONFIG', `no group ${JSON.stringify(r.group)} on this host (users in config.json)`, {
        hint: 'Create the group (groupadd), or remove the entry from "users" in the home\'s config.json.',
      });
    for (const m of (g[3] ?? '').split(',').filter((m) => m !== '')) add(getent('passwd', m)[0], r.namespaces);
    passwd ??= getent('passwd');
    for (const f of passwd) if (f[3] === g[2]) add(f, r.namespaces);
  }
  return out;
}

/**
 * Refuses a namespace the user's rules do not allow.
 * @throws E_PERMISSION with a hint naming the configuration
 */
export function checkNamespace(u: AllowedUser, ns: string, configPath: string): void {
  if (namespaceAllowed(u.namespaces, ns)) return;
  throw new AwcError('E_PERMISSION', `user ${u.name} may not use namespace ${JSON.stringify(ns)} (allowed: ${u.namespaces.join(', ')})`, {
    hint: `An administrator allows it in "users" of ${configPath}, then runs \`kill -HUP\` on the daemon (or \`awc daemon reload\`).`,
  });
}
