import { AwcError } from '../core/errors.js';
import { parseObjectStoreUrl } from '../config/backend-url.js';
import { FsObjectStore } from './fs-object-store.js';
import type { ObjectStore } from './object-store.js';

/**
 * Opens the object store a configuration names (`config.objectStore`, see
 * src/config/backend-url.ts): `file:` → `FsObjectStore`. The one place where a URL picks an
 * object-store adapter.
 * @throws E_CONFIG (bad URL)
 */
export function openObjectStore(url: string): ObjectStore {
  const where = parseObjectStoreUrl(url);
  switch (where.kind) {
    case 'file':
      return new FsObjectStore(where.path);
    case 's3':
      throw new AwcError('E_CONFIG', 'this build has no S3 object store yet', { hint: 'Use a file: object store.' });
  }
}
