import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AwcError } from '../../../src/core/errors.js';
import { loadConfig, pathsOf } from '../../../src/config/config.js';
import { namespaceAllowed, parseUserRules } from '../../../src/config/users-config.js';
import { checkNamespace, resolveUserRules } from '../../../src/daemon/users/user-access.js';

const code = (fn: () => unknown): string | undefined => {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof AwcError, String(err));
    return err.code;
  }
  return undefined;
};

test('users in config.json: valid entries load, every malformed one is E_CONFIG with a hint', () => {
  const home = mkdtempSync(join(tmpdir(), 'awc-users-config-'));
  try {
    const rules = [
      { group: 'awc', namespaces: ['default', 'team-*'] },
      { user: 'alice', namespaces: ['*'] },
    ];
    writeFileSync(join(home, 'config.json'), JSON.stringify({ users: rules }));
    assert.deepEqual(loadConfig({ home }, {}).users, rules);
    for (const bad of [
      {},
      [{ namespaces: ['default'] }],
      [{ user: 'a', group: 'b', namespaces: ['default'] }],
      [{ user: 'a' }],
      [{ user: 'a', namespaces: [] }],
      [{ user: 'a', namespaces: ['Bad NS'] }],
      [{ user: 'a b', namespaces: ['default'] }],
      [{ user: 'a', namespaces: ['default'], extra: 1 }],
      ['alice'],
    ]) {
      writeFileSync(join(home, 'config.json'), JSON.stringify({ users: bad }));
      try {
        loadConfig({ home }, {});
        assert.fail(`accepted ${JSON.stringify(bad)}`);
      } catch (err) {
        assert.ok(err instanceof AwcError && err.code === 'E_CONFIG', `${JSON.stringify(bad)}: ${String(err)}`);
        assert.match(err.hint ?? '', /namespaces/);
      }
    }
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
});

test('namespace patterns: * matches any run, nothing else is a wildcard', () => {
  assert.equal(namespaceAllowed(['team-*'], 'team-a'), true);
  assert.equal(namespaceAllowed(['team-*'], 'teamx'), false);
  assert.equal(namespaceAllowed(['a.b'], 'axb'), false);
  assert.equal(namespaceAllowed(['default'], 'default'), true);
  assert.equal(namespaceAllowed(['*'], 'anything'), true);
  const u = { name: 'u', uid: 1, gid: 1, namespaces: ['default'] };
  assert.equal(
    code(() => checkNamespace(u, 'other', '/h/config.json')),
    'E_PERMISSION',
  );
  assert.equal(
    code(() => checkNamespace(u, 'default', '/h/config.json')),
    undefined,
  );
});

test('users and groups that do not exist are E_CONFIG; root is never a per-user socket', () => {
  assert.equal(
    code(() => resolveUserRules(parseUserRules([{ user: 'no-such-user-awc', namespaces: ['*'] }]))),
    'E_CONFIG',
  );
  assert.equal(
    code(() => resolveUserRules(parseUserRules([{ group: 'no-such-group-awc', namespaces: ['*'] }]))),
    'E_CONFIG',
  );
  assert.equal(resolveUserRules(parseUserRules([{ user: 'root', namespaces: ['*'] }])).size, 0);
  // the per-user sockets of a home: one directory per home, outside it
  assert.equal(pathsOf({ home: '/var/lib/awc' }).userSockets, '/run/awc/users');
  assert.match(pathsOf({ home: '/srv/x' }).userSockets, /^\/run\/awc\/[0-9a-f]{12}\.users$/);
});
