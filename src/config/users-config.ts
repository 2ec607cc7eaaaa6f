import { AwcError } from '../core/errors.js';

/**
 * One entry of the root home's `users` (config.json): who, besides root, may use the host
 * daemon through a per-user socket, and in which namespaces (docs/how-to/ordinary-users.md).
 * Exactly one of `user` (a name or uid) and `group` (a name or gid: its members and the
 * users whose primary group it is). `namespaces`: names or `*` patterns (`team-*`, `*`).
 */
export interface UserRule {
  user?: string;
  group?: string;
  namespaces: string[];
}

const NAME = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}\$?$/;
const PATTERN = /^[a-z0-9*][a-z0-9_.*-]{0,62}$/;
const HINT =
  'Write "users": [{"group": "awc", "namespaces": ["default", "team-*"]}, {"user": "alice", "namespaces": ["*"]}] (see docs/reference/configuration.md).';

/**
 * Validates the `users` key of config.json.
 * @throws E_CONFIG naming the entry that is wrong, with a hint showing the shape
 */
export function parseUserRules(v: unknown): UserRule[] {
  if (!Array.isArray(v)) throw new AwcError('E_CONFIG', 'invalid users: must be a list of {user|group, namespaces}', { hint: HINT });
  return v.map((r: unknown, i) => {
    const where = `users[${i}]`;
    if (typeof r !== 'object' || r === null || Array.isArray(r))
      throw new AwcError('E_CONFIG', `invalid ${where}: not an object`, { hint: HINT });
    const o = r as Record<string, unknown>;
    const extra = Object.keys(o).filter((k) => !['user', 'group', 'namespaces'].includes(k));
    if (extra.length > 0) throw new AwcError('E_CONFIG', `invalid ${where}: unknown key ${JSON.stringify(extra[0])}`, { hint: HINT });
    if ((o.user === undefined) === (o.group === undefined))
      throw new AwcError('E_CONFIG', `invalid ${where}: needs exactly one of "user" and "group"`, { hint: HINT });
    const who = (o.user ?? o.group) as unknown;
    if (typeof who !== 'string' || !NAME.test(who))
      throw new AwcError('E_CONFIG', `invalid ${where}: ${JSON.stringify(who)} is not a user or group name or number`, { hint: HINT });
    const ns = o.namespaces;
    if (!Array.isArray(ns) || ns.length === 0 || !ns.every((p) => typeof p === 'string' && PATTERN.test(p)))
      throw new AwcError('E_CONFIG', `invalid ${where}.namespaces: a non-empty list of namespaces or patterns ("team-*", "*")`, {
        hint: HINT,
      });
    return o.user !== undefined ? { user: who, namespaces: ns as string[] } : { group: who, namespaces: ns as string[] };
  });
}

/** True when namespace `ns` matches one of `patterns` (`*` matches any run of characters). */
export function namespaceAllowed(patterns: readonly string[], ns: string): boolean {
  return patterns.some((p) => new RegExp(`^${p.replace(/[.]/g, '\\.').replace(/\*/g, '.*')}$`).test(ns));
}
