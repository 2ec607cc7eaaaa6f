import { readFileSync } from 'node:fs';

/** The package's version, from package.json next to dist/ ('unknown' when it cannot be read). */
export function packageVersion(): string {
  try {
    return JSON.parse(readFileSync(new URL('../../../../package.json', import.meta.url), 'utf8')).version;
  } catch {
    return 'unknown';
  }
}
