import { parseObjectStoreUrl } from '../../config/backend-url.js';
import type { ObjectStore } from '../object/object-store.js';

/**
 * Opens the object store a configuration names (`config.objectStore`, see
 * src/config/backend-url.ts): `file:` → `FsObjectStore`, `s3:` → `S3ObjectStore` (bucket, key
 * prefix, endpoint, region, path style from the URL; credentials from the AWS SDK's default chain). The one place where a URL picks an
 * object-store adapter. Each adapter is imported only when its URL names it, so that a command on
 * a `file:` store never loads the AWS SDK (CLI latency, docs/explanation/cli-latency.md).
 * @throws E_CONFIG (bad URL)
 */
export async function openObjectStore(url: string): Promise<ObjectStore> {
  const where = parseObjectStoreUrl(url);
  switch (where.kind) {
    case 'file': {
      const { FsObjectStore } = await import('../fs/fs-object-store.js');
      return new FsObjectStore(where.path);
    }
    case 's3': {
      const { S3ObjectStore } = await import('../s3/s3-object-store.js');
      return new S3ObjectStore({
        bucket: where.bucket,
        prefix: where.prefix,
        endpoint: where.endpoint,
        region: where.region,
        forcePathStyle: where.forcePathStyle,
        multipartThresholdBytes: where.multipartThresholdBytes,
        partBytes: where.partBytes,
      });
    }
  }
}
