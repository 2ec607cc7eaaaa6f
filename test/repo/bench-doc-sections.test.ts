import assert from 'node:assert/strict';
import { test } from 'node:test';
import { keepDocSections } from '../../bench/doc-section.js';

/** A full `npm run bench` re-renders docs/benchmarks.md: sections standalone benches wrote there must survive it. */
test('keepDocSections appends the marked sections the fresh page lacks, once, and leaves the rest', () => {
  const a = '<!-- cli-latency:begin (x) -->\nA old\n<!-- cli-latency:end -->';
  const b = '<!-- claude-hook:begin (y) -->\nB\n<!-- claude-hook:end -->';
  const old = `# Benchmarks\n\ntable\n\n${a}\n\n${b}\n`;
  const freshA = '<!-- cli-latency:begin (x) -->\nA new\n<!-- cli-latency:end -->';
  const fresh = `# Benchmarks\n\nnew table\n\n${freshA}\n`;
  const out = keepDocSections(old, fresh);
  assert.equal(out, `# Benchmarks\n\nnew table\n\n${freshA}\n\n${b}\n`);
  assert.equal(keepDocSections(old, out), out, 'nothing is appended twice');
  assert.equal(keepDocSections('', fresh), fresh);
});
