/**
 * True when `path` is `dir` or below it, component by component (`/a/bc` is not below
 * `/a/b`). Both absolute and normalised (no `..`, no trailing `/` except the root `/`);
 * nothing is resolved: the caller resolves symbolic links first when they matter.
 */
export function within(dir: string, path: string): boolean {
  return path === dir || path.startsWith(dir.endsWith('/') ? dir : `${dir}/`);
}
