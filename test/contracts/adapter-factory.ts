/**
 * How a contract suite gets the adapter it tests: `create` makes a fresh, empty one (its own
 * temp directory, database or bucket), `cleanup` releases it after each test (closes it,
 * removes what `create` made). A suite calls `create` once per test.
 */
export interface AdapterFactory<T> {
  create(): Promise<T>;
  cleanup(adapter: T): Promise<void>;
}
