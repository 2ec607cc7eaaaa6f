/**
 * A workspace's `.gitignore` is untrusted content: a line no regular expression takes (a
 * bracket range out of order, as binary bytes written into the file make) matches nothing,
 * as git's would, and never fails a checkpoint; the other lines keep their meaning. The same
 * pattern in `.awc.json`, the project's own configuration, is refused with E_CONFIG.
 * (Found by the checkpoint property test: an append of random bytes to a `.gitignore`
 * failed the checkpoint with E_INTERNAL.)
 */
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { AwcError } from '../../../src/core/errors.js';
import { CapturePolicy, gitignoreMatcher, isUsablePattern, parseProjectConfig } from '../../../src/service/capture/capture-policy.js';

const BAD = ['[--!]', '[\u0010-\u0005]x', '[\u00ff-\u0001]'];

test('a .gitignore line that cannot be compiled matches nothing; the others still do', async () => {
  for (const b of BAD) assert.equal(isUsablePattern(b), false, JSON.stringify(b));
  assert.equal(isUsablePattern('*.log'), true);
  const text = ['*.log', ...BAD, 'build/', '!keep.log', '\u0000\u0007junk'].join('\n');
  const ig = gitignoreMatcher(text);
  assert.equal(ig.ignores('a.log'), true);
  assert.equal(ig.ignores('keep.log'), false, 'a negation after a dropped line keeps its place');
  assert.equal(ig.ignores('build/'), true);
  assert.equal(ig.ignores('src/x.ts'), false);
  // through the policy, as a checkpoint classifies
  const policy = new CapturePolicy(parseProjectConfig(undefined), { dropScratch: true });
  const root = policy.root(text);
  assert.equal(root.classOf('a.log', false), 'ignored');
  assert.equal(root.classOf('build', true), 'reconstructible');
  assert.equal(root.classOf('src', true), 'durable');
  const child = await root.child('src', async () => `${BAD[0]}\n*.tmp\n`);
  assert.equal(child.classOf('x.tmp', false), 'ignored');
  assert.equal(child.classOf('x.ts', false), 'durable');
});

test('the same pattern in .awc.json is E_CONFIG naming it', () => {
  assert.throws(
    () => parseProjectConfig(JSON.stringify({ scratch: ['tmp/', BAD[0]] })),
    (e: unknown) => e instanceof AwcError && e.code === 'E_CONFIG' && e.message.includes(JSON.stringify(BAD[0])) && e.hint !== undefined,
  );
});
