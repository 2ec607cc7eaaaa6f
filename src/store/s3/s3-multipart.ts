import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  UploadPartCommand,
  type S3Client,
} from '@aws-sdk/client-s3';
import { killPoint } from '../../core/kill-point.js';

/** Where and how one multipart upload goes. */
export interface MultipartTarget {
  client: S3Client;
  bucket: string;
  /** The full object key (with the store's prefix). */
  key: string;
  /** Bytes per part (the last part may be smaller). AWS S3 wants at least 5 MiB for every part but the last. */
  partBytes: number;
  /** Parts in flight at once. */
  concurrency: number;
  /** Called with the upload id right after CreateMultipartUpload (an injection point for tests). */
  onCreated?: (uploadId: string) => void | Promise<void>;
}

/**
 * Uploads `body` as one object in parts: CreateMultipartUpload, UploadPart for each
 * `partBytes` slice (`concurrency` at a time; each call retried by the client's retry
 * strategy), CompleteMultipartUpload. The object appears whole or not at all (S3 makes it
 * visible only at Complete). On any failure the upload is aborted (best effort: an upload
 * a crash leaves behind is removed later by `S3ObjectStore.sweepIncomplete`) and the
 * error is rethrown as the SDK gave it.
 */
export async function multipartUpload(target: MultipartTarget, body: Uint8Array): Promise<void> {
  const { client, bucket, key, partBytes } = target;
  const created = await client.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: key }));
  const uploadId = created.UploadId;
  if (!uploadId) throw Object.assign(new Error('CreateMultipartUpload returned no UploadId'), { $fault: 'server', name: 'NoUploadId' });
  try {
    await target.onCreated?.(uploadId);
    const count = Math.max(1, Math.ceil(body.length / partBytes));
    const etags: string[] = new Array<string>(count);
    let next = 0;
    let failed = false;
    const worker = async (): Promise<void> => {
      while (next < count && !failed) {
        const i = next++;
        const part = body.subarray(i * partBytes, Math.min(body.length, (i + 1) * partBytes));
        const r = await client.send(
          new UploadPartCommand({
            Bucket: bucket,
            Key: key,
            UploadId: uploadId,
            PartNumber: i + 1,
            Body: part,
            ContentLength: part.length,
          }),
        );
        if (!r.ETag) throw Object.assign(new Error(`UploadPart ${i + 1} returned no ETag`), { $fault: 'server', name: 'NoETag' });
        etags[i] = r.ETag;
        killPoint('object.put.during'); // a part is up, the object not yet complete
      }
    };
    // On a failure the other workers finish their part in flight and stop, so the abort below comes after the last UploadPart.
    const settled = await Promise.allSettled(
      Array.from({ length: Math.min(target.concurrency, count) }, () =>
        worker().catch((err: unknown) => {
          failed = true;
          throw err;
        }),
      ),
    );
    const failure = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
    if (failure) throw failure.reason;
    await client.send(
      new CompleteMultipartUploadCommand({
        Bucket: bucket,
        Key: key,
        UploadId: uploadId,
        MultipartUpload: { Parts: etags.map((ETag, i) => ({ ETag, PartNumber: i + 1 })) },
      }),
    );
  } catch (err) {
    await client.send(new AbortMultipartUploadCommand({ Bucket: bucket, Key: key, UploadId: uploadId })).catch(() => undefined);
    throw err;
  }
}
