import { AwcError } from '../../core/errors.js';

/** Attempts of a commit refused because gc condemned a pack it relied on. */
export const COMMIT_ATTEMPTS = 3;

/** Test-only injection point of a writing command: awaited right before its catalog commit, with the attempt number (0-based). */
export interface CommitHooks {
  beforeCommit?(attempt: number): void | Promise<void>;
}

/**
 * Runs `attempt` (a whole write: dedup, upload, commit) again when its commit was refused
 * with E_PACK_CONDEMNED (docs/explanation/gc.md#why-a-concurrent-checkpoint-is-safe): the next
 * attempt's dedup lookups skip the condemned pack, so it uploads those blobs anew.
 * @throws the last E_PACK_CONDEMNED after `attempts` tries, or whatever `attempt` throws otherwise
 */
export async function retryCondemned<T>(attempt: (n: number) => Promise<T>, attempts = COMMIT_ATTEMPTS): Promise<T> {
  for (let n = 0; ; n++) {
    try {
      return await attempt(n);
    } catch (err) {
      if (!(err instanceof AwcError) || err.code !== 'E_PACK_CONDEMNED' || n + 1 >= attempts) throw err;
    }
  }
}
