import type { DirFd } from './dir-fd.js';
import type { FileEntry } from './tree.js';

/**
 * What a capture (checkpoint, directory import) does with one entry
 * (docs/explanation/capture-classes.md): `store` it, leave it out as a `secret` (never in
 * the object store; it stays on the host), or drop it as `scratch` (declared disposable).
 * `base` (a checkpoint's regular file only): keep what the base has at that path, as if the
 * workspace had not changed it: the `.git` file of a workspace registered as a git worktree
 * of its project (docs/explanation/claude-code.md#what-a-checkpoint-holds), which names the
 * project's repository and is no content of the workspace; a walk that knows no base drops it.
 */
export type CaptureVerdict = 'store' | 'secret' | 'scratch' | 'base';

/** The most a verdict's `peek` asks for: 1 MiB + 1 byte (a PEM file is read whole up to 1 MiB; one more byte says it is longer). */
export const PEEK_MAX_BYTES = 1024 * 1024 + 1;

/**
 * The capture filter as one directory of a walk sees it. Walkers (importDir, mergeUpper)
 * ask it about each regular file and directory they would store, top-down: a directory's
 * filter comes from its parent's `child`. Implemented by the service (src/service/capture/capture-policy.ts).
 */
export interface CaptureDirFilter {
  /**
   * The verdict for child `name`. `peek(max)` returns the first bytes (up to `max`, default
   * 64 KiB, at most PEEK_MAX_BYTES) of a regular file, for the secrets that depend on content
   * (an `.npmrc` with a token, a PEM file with a private key); never called for a directory.
   */
  verdict(name: string, isDir: boolean, peek: (max?: number) => Buffer): CaptureVerdict;
  /** The filter of stored child directory `name`; `gitignore` reads that directory's `.gitignore` (undefined when none), called only when needed. */
  child(name: string, gitignore: () => Promise<string | undefined>): Promise<CaptureDirFilter>;
}

/** A capture filter for one walk, and where the walk reports what it left out. */
export interface CaptureFilter {
  /**
   * The root directory's filter. `read` gives the root's `.gitignore` or `.awc.json` text (undefined when none).
   * @throws E_CONFIG (an invalid `.awc.json`)
   */
  root(read: (name: '.gitignore' | '.awc.json') => Promise<string | undefined>): Promise<CaptureDirFilter>;
  /**
   * A secret file left out, open at `fd` (the walker closes it afterwards; read it now or never).
   * `rel` is its slash path. `fd` is undefined when the walk reads a stream (a tar import): nothing to keep then.
   */
  secret(rel: string, fd: number | undefined, size: number): void;
  /** A scratch entry dropped: a directory open as `dir` (the walker closes it) or a file of `size` bytes. */
  scratch(rel: string, what: { dir: DirFd } | { size: number }): void;
  /** The content of a stored file (a base entry a walk needs: a `.gitignore` or `.awc.json` not in the upper). */
  readStored(entry: FileEntry): Promise<Buffer>;
  /**
   * After `root`: a string that names everything a regular file's verdict depends on besides
   * its slash path and its content (the configuration, the rules' version), so that a walk
   * may keep a verdict recorded under the same key for a file it finds unchanged; undefined
   * when verdicts depend on more (the walk's `.gitignore` files, when scratch is dropped).
   */
  verdictsKey?(): string | undefined;
}
