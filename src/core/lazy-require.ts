import { createRequire } from 'node:module';

const requireHere = createRequire(import.meta.url);

/**
 * A CommonJS package loaded on first use instead of at import: `lazyRequire<typeof import('x')>('x')`
 * returns a function that `require`s the package the first time it is called and returns the
 * same module every time after. For libraries a module needs only in some calls (native addons
 * such as lz4-napi and fs-xattr: their loaders and `dlopen` cost milliseconds every command
 * would pay, docs/explanation/cli-latency.md). The type argument names the module's type only
 * (`import type`), so nothing loads before the first call.
 * @throws what `require` throws on the first call (a missing or broken package)
 */
export function lazyRequire<T>(specifier: string): () => T {
  let mod: T | undefined;
  return () => (mod ??= requireHere(specifier) as T);
}
