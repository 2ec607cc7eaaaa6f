/**
 * Test-only crash injection (docs/explanation/crash-safety.md). The writer, the commits and gc
 * call `killPoint(name)` at every step that touches storage; when the environment variable
 * `AWC_TEST_KILL_AT` names that point, the process kills itself with SIGKILL there: no
 * `finally`, no exit handler, no flush runs, exactly as if the machine had lost the process.
 *
 * `AWC_TEST_KILL_AT=name` kills at the first hit of `name`; `name#N` at the N-th hit (from 1)
 * in this process. Unset (every real run), a call costs one property read. The variable is
 * read at each call, so a warm worker that takes on a caller's environment obeys it too.
 */

const hits = new Map<string, number>();

/**
 * Kills this process (SIGKILL) when `AWC_TEST_KILL_AT` names this point (see the module doc).
 * @param name a stable point name, e.g. `pack.upload.before` (docs/explanation/crash-safety.md lists them)
 */
export function killPoint(name: string): void {
  const at = process.env.AWC_TEST_KILL_AT;
  if (at === undefined || at === '') return;
  const n = (hits.get(name) ?? 0) + 1;
  hits.set(name, n);
  if (at === name || at === `${name}#${n}`) process.kill(process.pid, 'SIGKILL');
}
