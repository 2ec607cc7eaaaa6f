import { isAbsolute, normalize } from 'node:path';
import { AwcError } from '../core/errors.js';

/**
 * The two backend URLs of the configuration, parsed: where the catalog (metadata) and the
 * object store (bytes) live. One host uses the embedded pair (`sqlite:` + `file:`, under
 * the home); a fleet points every host at one PostgreSQL and one bucket.
 *
 *   catalog:     sqlite:/abs/path/catalog.sqlite   (also sqlite:///abs/…)
 *                postgres://user:pass@host:5432/db (also postgresql://…; libpq-style query keys pass through)
 *   objectStore: file:/abs/dir                     (also file:///abs/…)
 *                s3://bucket/prefix?endpoint=http://host:9000&region=us-east-1&forcePathStyle=true
 */

/** A parsed catalog URL. */
export type CatalogLocation = { kind: 'sqlite'; path: string } | { kind: 'postgres'; url: string };

/** A parsed object-store URL. `prefix` is '' or ends with '/'. */
export type ObjectStoreLocation =
  | { kind: 'file'; path: string }
  | {
      kind: 's3';
      bucket: string;
      prefix: string;
      endpoint?: string;
      region?: string;
      forcePathStyle: boolean;
      /** Bodies of at least this many bytes go up in parts (`multipartThreshold`; default 64 MiB). */
      multipartThresholdBytes?: number;
      /** Bytes per part (`partSize`; default 16 MiB; AWS S3 wants at least 5 MiB). */
      partBytes?: number;
    };

/** The absolute, normalised path of a `scheme:/path` or `scheme:///path` URL, or undefined when it is not one. */
function pathOf(url: string, scheme: string): string | undefined {
  if (!url.startsWith(`${scheme}:`)) return undefined;
  let p = url.slice(scheme.length + 1);
  if (p.startsWith('//')) p = p.slice(2);
  try {
    p = decodeURIComponent(p);
  } catch {
    return undefined;
  }
  if (!isAbsolute(p) || p.includes('\0')) return undefined;
  return normalize(p);
}

/** Why `url` (starting `file:`) is no `file:` URL pathOf takes: a relative path, a bad %-escape, a NUL byte. */
function fileUrlProblem(url: string): string {
  const p = url.slice('file:'.length).replace(/^\/\//, '');
  let decoded: string;
  try {
    decoded = decodeURIComponent(p);
  } catch {
    return 'a bad %-escape in the path (write a literal % as %25)';
  }
  if (decoded.includes('\0')) return 'a NUL byte in the path';
  return `a relative file URL (${JSON.stringify(decoded)} is not an absolute path): write the directory's absolute path, file:/absolute/dir or file:///absolute/dir`;
}

/**
 * Parses a catalog URL (see module doc).
 * @throws E_CONFIG naming `key` and the accepted forms
 */
export function parseCatalogUrl(url: string, key = 'catalog'): CatalogLocation {
  if (typeof url === 'string') {
    const path = pathOf(url, 'sqlite');
    if (path !== undefined) return { kind: 'sqlite', path };
    if (/^postgres(ql)?:\/\//.test(url)) {
      try {
        new URL(url);
        return { kind: 'postgres', url };
      } catch {
        // falls through to the error
      }
    }
  }
  throw new AwcError('E_CONFIG', `invalid ${key} ${JSON.stringify(url)}`, {
    hint: 'Use sqlite:/absolute/path/catalog.sqlite or postgres://user@host:5432/database.',
    details: { key },
  });
}

/**
 * Parses an object-store URL (see module doc). Query keys of `s3://`: `endpoint` (an
 * http(s) URL), `region`, `forcePathStyle` (`true`/`false`; default true when an endpoint
 * is given, as S3-compatible servers expect), `multipartThreshold` and `partSize` (bytes,
 * whole numbers ≥ 1: bodies of at least the threshold go up as a multipart upload in parts
 * of that size; defaults 64 MiB and 16 MiB).
 * @throws E_CONFIG naming `key` and the accepted forms
 */
export function parseObjectStoreUrl(url: string, key = 'objectStore'): ObjectStoreLocation {
  const bad = (why: string): AwcError =>
    new AwcError('E_CONFIG', `invalid ${key} ${JSON.stringify(url)}: ${why}`, {
      hint: 'Use file:/absolute/dir or s3://bucket/prefix?endpoint=http://host:port&region=REGION.',
      details: { key },
    });
  if (typeof url !== 'string') throw bad('not a string');
  const path = pathOf(url, 'file');
  if (path !== undefined) return { kind: 'file', path };
  if (url.startsWith('file:')) throw bad(fileUrlProblem(url));
  if (!url.startsWith('s3://')) throw bad('unknown scheme');
  // (URL parsing would quietly resolve `.` and `..` away: a prefix is taken as written)
  if (/\/\.{1,2}(\/|\?|$)/.test(url.slice(5))) throw bad('bad key prefix');
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw bad('not a URL');
  }
  const bucket = u.hostname;
  if (!/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/.test(bucket)) throw bad('a bucket name is 3–63 lowercase letters, digits, "." or "-"');
  let prefix = decodeURIComponent(u.pathname.replace(/^\/+/, ''));
  if (prefix !== '' && !prefix.endsWith('/')) prefix += '/';
  if (prefix.split('/').some((c, i, all) => (c === '' && i < all.length - 1) || c === '.' || c === '..')) throw bad('bad key prefix');
  const known = new Set(['endpoint', 'region', 'forcePathStyle', 'multipartThreshold', 'partSize']);
  for (const k of u.searchParams.keys())
    if (!known.has(k)) throw bad(`unknown query key ${JSON.stringify(k)} (known: ${[...known].join(', ')})`);
  const endpoint = u.searchParams.get('endpoint') ?? undefined;
  if (endpoint !== undefined && !/^https?:\/\/[^/]/.test(endpoint)) throw bad('endpoint must be an http:// or https:// URL');
  const fps = u.searchParams.get('forcePathStyle');
  if (fps !== null && fps !== 'true' && fps !== 'false') throw bad('forcePathStyle must be true or false');
  const bytes = (k: string): number | undefined => {
    const v = u.searchParams.get(k);
    if (v === null) return undefined;
    if (!/^[1-9]\d{0,14}$/.test(v)) throw bad(`${k} must be a whole number of bytes (at least 1)`);
    return Number(v);
  };
  return {
    kind: 's3',
    bucket,
    prefix,
    endpoint,
    region: u.searchParams.get('region') ?? undefined,
    forcePathStyle: fps === null ? endpoint !== undefined : fps === 'true',
    multipartThresholdBytes: bytes('multipartThreshold'),
    partBytes: bytes('partSize'),
  };
}

/** `sqlite:` URL of a path (the default catalog under a home). */
export function sqliteUrl(path: string): string {
  return `sqlite:${path.replace(/%/g, '%25')}`;
}

/** `file:` URL of a path (the default object store under a home). */
export function fileUrl(path: string): string {
  return `file:${path.replace(/%/g, '%25')}`;
}

/** The URL with any password replaced by `***` (for messages and `awc doctor`). */
export function redactUrl(url: string): string {
  return url.replace(/^([a-z0-9+.-]+:\/\/[^:/@]*:)[^@/]*@/i, '$1***@');
}
