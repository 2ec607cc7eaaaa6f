/**
 * How a contract suite gets the adapter it tests: `create` makes a fresh, empty one (its own
 * temp directory, database or bucket), `cleanup` releases it after each test (closes it,
 * removes what `create` made). A suite calls `create` once per test.
 */
export interface AdapterFactory<T> {
  create(): Promise<T>;
  cleanup(adapter: T): Promise<void>;
}

/**
 * Runs `fn` on a fresh adapter from `factory` and always cleans it up, whether `fn` passes or
 * throws (the per-test pattern of the contract suites).
 */
export async function withAdapter<T>(factory: AdapterFactory<T>, fn: (adapter: T) => Promise<void>): Promise<void> {
  const adapter = await factory.create();
  try {
    await fn(adapter);
  } finally {
    await factory.cleanup(adapter);
  }
}
