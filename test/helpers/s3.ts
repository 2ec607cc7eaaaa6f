import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import {
  AbortMultipartUploadCommand,
  CreateBucketCommand,
  DeleteBucketCommand,
  DeleteObjectCommand,
  ListMultipartUploadsCommand,
  S3Client,
  paginateListObjectsV2,
} from '@aws-sdk/client-s3';
import type { S3ObjectStoreOptions } from '../../src/store/s3/s3-object-store.js';
import { PROJECT } from './cli.js';

/**
 * The S3 endpoint the tests use: `AWC_TEST_S3_ENDPOINT` when set (CI starts one server:
 * .ci/run), else one s3rver child process per test process (scripts/s3-server.mjs on
 * 127.0.0.1, a random port, a temp directory; stopped when the test process exits).
 * Each test takes its own bucket (`freshBucket`), removed when the test ends.
 */

/** s3rver's account (it checks the access key id only). */
export const S3_TEST_CREDENTIALS = { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' };

// No test may ever ask an instance metadata service (a non-loopback address) for credentials.
process.env.AWS_EC2_METADATA_DISABLED = 'true';
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';

/** A running S3 server of the tests. */
export interface S3TestServer {
  endpoint: string;
  /** Stops it and removes its directory. */
  stop(): Promise<void>;
}

/** Starts scripts/s3-server.mjs as a child process (`plain`: s3rver without the upload listing and abort it adds). */
export async function startS3Server(opts: { plain?: boolean } = {}): Promise<S3TestServer> {
  const args = [
    '--openssl-legacy-provider',
    join(PROJECT, 'scripts', 's3-server.mjs'),
    '--parent-pid',
    String(process.pid),
    ...(opts.plain ? ['--plain'] : []),
  ];
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  const kill = (): void => void child.kill('SIGTERM');
  process.once('exit', kill);
  const line = await new Promise<string>((resolve, reject) => {
    const rl = createInterface({ input: child.stdout! });
    rl.once('line', (l) => {
      rl.close();
      resolve(l);
    });
    child.once('exit', (code) => reject(new Error(`scripts/s3-server.mjs exited ${code} before it answered`)));
  });
  child.unref();
  (child.stdout as unknown as { unref?: () => void }).unref?.();
  const { endpoint } = JSON.parse(line) as { endpoint: string };
  return {
    endpoint,
    async stop() {
      process.removeListener('exit', kill);
      if (child.exitCode !== null) return;
      const gone = new Promise((r) => child.once('exit', r));
      child.ref(); // (unref'd while it runs, so that it never keeps a test process alive)
      child.kill('SIGTERM');
      await gone;
    },
  };
}

let shared: Promise<string> | undefined;

/** The endpoint of the tests' S3 server (see the module doc). */
export function s3Endpoint(): Promise<string> {
  const fromEnv = process.env.AWC_TEST_S3_ENDPOINT;
  if (fromEnv) return Promise.resolve(fromEnv);
  shared ??= startS3Server().then((s) => s.endpoint);
  return shared;
}

/** An SDK client of the test server (for set-up and checks beside the store under test). */
export function testS3Client(endpoint: string): S3Client {
  return new S3Client({
    endpoint,
    region: 'us-east-1',
    forcePathStyle: true,
    credentials: S3_TEST_CREDENTIALS,
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
  });
}

/** A bucket of its own for one test. */
export interface TestBucket {
  name: string;
  endpoint: string;
  client: S3Client;
  /** The `objectStore` URL of this bucket and a key prefix (e.g. `awc`). */
  url(prefix?: string): string;
  /** `S3ObjectStore` options for this bucket and a key prefix ('' or ending in '/'), with the test credentials. */
  options(prefix?: string): S3ObjectStoreOptions;
  /** Environment of a CLI process using this bucket (credentials as AWS_* variables). */
  env: NodeJS.ProcessEnv;
  /** Removes every object and upload, then the bucket. */
  remove(): Promise<void>;
}

/** Creates a uniquely named bucket (`awc-test-<hex>`) on `endpoint` (default {@link s3Endpoint}); removed when `t` ends, if given. */
export async function freshBucket(t?: { after(fn: () => Promise<void>): void }, endpoint?: string): Promise<TestBucket> {
  const ep = endpoint ?? (await s3Endpoint());
  const name = `awc-test-${randomBytes(6).toString('hex')}`;
  const client = testS3Client(ep);
  await client.send(new CreateBucketCommand({ Bucket: name }));
  const b: TestBucket = {
    name,
    endpoint: ep,
    client,
    url: (prefix = '') => `s3://${name}/${prefix}?endpoint=${encodeURIComponent(ep)}`,
    options: (prefix = '') => ({ bucket: name, prefix, endpoint: ep, forcePathStyle: true, credentials: S3_TEST_CREDENTIALS }),
    env: {
      AWS_ACCESS_KEY_ID: S3_TEST_CREDENTIALS.accessKeyId,
      AWS_SECRET_ACCESS_KEY: S3_TEST_CREDENTIALS.secretAccessKey,
      AWS_REGION: 'us-east-1',
      AWS_EC2_METADATA_DISABLED: 'true',
      AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true',
    },
    async remove() {
      await emptyBucket(client, name);
      await client.send(new DeleteBucketCommand({ Bucket: name }));
      client.destroy();
    },
  };
  t?.after(() => b.remove());
  return b;
}

async function emptyBucket(client: S3Client, bucket: string): Promise<void> {
  const keys: string[] = [];
  for await (const page of paginateListObjectsV2({ client }, { Bucket: bucket })) for (const o of page.Contents ?? []) keys.push(o.Key!);
  for (let i = 0; i < keys.length; i += 32)
    await Promise.all(keys.slice(i, i + 32).map((Key) => client.send(new DeleteObjectCommand({ Bucket: bucket, Key }))));
  try {
    const ups = await client.send(new ListMultipartUploadsCommand({ Bucket: bucket }));
    for (const u of ups.Uploads ?? [])
      await client.send(new AbortMultipartUploadCommand({ Bucket: bucket, Key: u.Key!, UploadId: u.UploadId! }));
  } catch (err) {
    if ((err as { name?: string }).name !== 'NotImplemented') throw err; // a plain s3rver
  }
}
