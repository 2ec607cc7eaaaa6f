import { AwcError } from '../../core/errors.js';

/** What a failed S3 call was about, for the message and `details` (never credentials). */
export interface S3Context {
  /** The S3 operation, e.g. `PutObject`. */
  operation: string;
  bucket: string;
  /** The full object key (with the store's prefix), when the call was about one object. */
  key?: string;
  /** The endpoint, already redacted (src/config/backend-url.ts `redactUrl`), or undefined for AWS. */
  endpoint?: string;
}

/** The fields of an SDK error that say what happened (an `S3ServiceException`, a Node network error, a credentials error). */
interface SdkErrorLike {
  name?: string;
  code?: string;
  message?: string;
  $metadata?: { httpStatusCode?: number; attempts?: number };
  $fault?: 'client' | 'server';
}

const DENIED = new Set([
  'AccessDenied',
  'InvalidAccessKeyId',
  'SignatureDoesNotMatch',
  'ExpiredToken',
  'InvalidToken',
  'TokenRefreshRequired',
  'AllAccessDisabled',
  'AccountProblem',
  'CredentialsProviderError',
]);
const NETWORK = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'ECONNABORTED',
  'UND_ERR_SOCKET',
]);
/** A full server or an exhausted quota: MinIO (507 `XMinioStorageFull`, a bucket quota), Ceph RGW (`QuotaExceeded`, 403), WebDAV-style 507. */
const FULL = new Set(['XMinioStorageFull', 'XMinioAdminBucketQuotaExceeded', 'QuotaExceeded', 'InsufficientStorage']);
const WRONG_REGION = new Set(['PermanentRedirect', 'AuthorizationHeaderMalformed', 'IllegalLocationConstraintException']);

/**
 * Maps an error of the AWS SDK (or of the network under it) to an AwcError with a stable
 * code and a hint, after the SDK's own retries gave up:
 *
 * - `NoSuchKey`, or 404 on an object → E_OBJECT_NOT_FOUND
 * - `NoSuchBucket` → E_BUCKET_NOT_FOUND
 * - a full server or quota (507, `XMinioStorageFull`, `QuotaExceeded`, a MinIO bucket quota) → E_NO_SPACE
 * - 403, `AccessDenied`, `InvalidAccessKeyId`, `SignatureDoesNotMatch`, expired or missing
 *   credentials → E_OBJECT_STORE_DENIED
 * - a wrong region (`PermanentRedirect`, `AuthorizationHeaderMalformed`, 301) → E_CONFIG
 * - `NotImplemented` → E_UNSUPPORTED (an S3-compatible server without the call)
 * - throttling (`SlowDown`, 429), 5xx, timeouts, refused or reset connections, DNS
 *   failures → E_OBJECT_STORE_UNAVAILABLE (retryable; `details.attempts` says how many the SDK made)
 * - any other answer of the server → E_OBJECT_STORE_ERROR
 *
 * The message names the operation, bucket, key and the server's error code and message;
 * `details` holds them as fields. Neither ever carries a credential: the SDK's error
 * objects (which hold the request) are not kept as `cause`.
 */
export function s3ToAwcError(err: unknown, ctx: S3Context): AwcError {
  if (err instanceof AwcError) return err;
  const e = (err ?? {}) as SdkErrorLike;
  const status = e.$metadata?.httpStatusCode;
  const name = e.name ?? 'Error';
  const s3Code = typeof e.code === 'string' && e.code !== '' ? e.code : name;
  const where = `s3://${ctx.bucket}/${ctx.key ?? ''}`;
  const what = `${ctx.operation} ${where}${ctx.endpoint ? ` at ${ctx.endpoint}` : ''}`;
  const said = scrub(e.message ?? '');
  const details: Record<string, unknown> = { operation: ctx.operation, bucket: ctx.bucket };
  if (ctx.key !== undefined) details.key = ctx.key;
  if (ctx.endpoint !== undefined) details.endpoint = ctx.endpoint;
  if (status !== undefined) details.status = status;
  details.s3Code = s3Code;
  if (e.$metadata?.attempts !== undefined) details.attempts = e.$metadata.attempts;
  const make = (code: ConstructorParameters<typeof AwcError>[0], message: string, hint?: string): AwcError =>
    new AwcError(code, message, { hint, details });

  if (name === 'NoSuchBucket' || s3Code === 'NoSuchBucket')
    return make('E_BUCKET_NOT_FOUND', `${what}: bucket ${JSON.stringify(ctx.bucket)} does not exist`);
  if (FULL.has(name) || FULL.has(s3Code) || status === 507)
    return make(
      'E_NO_SPACE',
      `${what}: the object store is full (${s3Code}${status ? ` (HTTP ${status})` : ''}${said ? `: ${said}` : ''})`,
      "The object store's disks or the bucket's quota are full; free space there (`awc gc` removes what no snapshot needs) or raise the quota, then run the command again.",
    );
  if (name === 'NoSuchKey' || (status === 404 && ctx.key !== undefined && name !== 'NoSuchUpload'))
    return make('E_OBJECT_NOT_FOUND', `object ${where} not found`);
  if (DENIED.has(name) || status === 403) {
    const missing = name === 'CredentialsProviderError';
    return make(
      'E_OBJECT_STORE_DENIED',
      missing ? `${what}: no AWS credentials found (${said})` : `${what}: access denied (${s3Code}${said ? `: ${said}` : ''})`,
      missing
        ? 'Set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary credentials), or AWS_PROFILE with ~/.aws/credentials.'
        : undefined,
    );
  }
  if (WRONG_REGION.has(name) || status === 301)
    return make(
      'E_CONFIG',
      `${what}: the bucket is in another region (${s3Code})`,
      "Set the bucket's region: s3://BUCKET/PREFIX?region=REGION in objectStore, or AWS_REGION.",
    );
  if (name === 'NotImplemented' || status === 501)
    return make(
      'E_UNSUPPORTED',
      `${what}: the object store does not implement ${ctx.operation}`,
      'Use an S3-compatible server that implements it (AWS S3, MinIO, Ceph), or see docs/how-to/s3-object-store.md.',
    );
  const network = typeof e.code === 'string' && NETWORK.has(e.code);
  const timeout = name === 'TimeoutError' || name === 'RequestTimeout' || name === 'RequestTimeoutException';
  if (network || timeout || status === 429 || (status !== undefined && status >= 500) || e.$fault === 'server' || name === 'SlowDown') {
    const tries = e.$metadata?.attempts;
    const why = network ? `${e.code}${said ? `: ${said}` : ''}` : `${s3Code}${status ? ` (HTTP ${status})` : ''}${said ? `: ${said}` : ''}`;
    return make(
      'E_OBJECT_STORE_UNAVAILABLE',
      `${what} failed${tries ? ` after ${tries} attempt${tries === 1 ? '' : 's'}` : ''}: ${why}`,
      network && e.code === 'ECONNREFUSED'
        ? `Nothing answers at the object store's endpoint${ctx.endpoint ? ` ${ctx.endpoint}` : ''}; start the server or fix endpoint= in objectStore.`
        : undefined,
    );
  }
  if (e.$metadata !== undefined || e.$fault !== undefined)
    return make('E_OBJECT_STORE_ERROR', `${what}: ${s3Code}${status ? ` (HTTP ${status})` : ''}${said ? `: ${said}` : ''}`);
  // Not an SDK error: a network error below the SDK without a code, or a bug of ours.
  return new AwcError('E_INTERNAL', `${what}: ${said || String(err)}`, { cause: err, details });
}

/** An error message with anything that looks like a credential cut out (`key=…` / `Credential=…` pairs). */
function scrub(message: string): string {
  return message
    .replace(
      /(Credential|Signature|X-Amz-Security-Token|X-Amz-Signature|AWSAccessKeyId|SecretAccessKey|SessionToken)=[^\s,&;]*/gi,
      '$1=***',
    )
    .slice(0, 500);
}
