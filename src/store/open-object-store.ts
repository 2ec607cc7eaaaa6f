import { parseObjectStoreUrl } from '../config/backend-url.js';
import { FsObjectStore } from './fs-object-store.js';
import type { ObjectStore } from './object-store.js';
import { S3ObjectStore } from './s3/s3-object-store.js';

/**
 * Opens the object store a configuration names (`config.objectStore`, see
 * src/config/backend-url.ts): `file:` → `FsObjectStore`, `s3:` → `S3ObjectStore` (bucket, key
 * prefix, endpoint, region, path style from the URL; credentials from the AWS SDK's default chain). The one place where a URL picks an
 * object-store adapter.
 * @throws E_CONFIG (bad URL)
 */
export function openObjectStore(url: string): ObjectStore {
  const where = parseObjectStoreUrl(url);
  switch (where.kind) {
    case 'file':
      return new FsObjectStore(where.path);
    case 's3':
      return new S3ObjectStore({
        bucket: where.bucket,
        prefix: where.prefix,
        endpoint: where.endpoint,
        region: where.region,
        forcePathStyle: where.forcePathStyle,
      });
  }
}
