#!/usr/bin/env node
// An S3 protocol server for the tests and CI: s3rver (npm, a devDependency) on loopback, storing in a
// directory. Credentials: access key id S3RVER, secret S3RVER (s3rver checks the key id; it does not verify
// SigV4 signatures).
//
//   node --openssl-legacy-provider scripts/s3-server.mjs [--port N] [--address 127.0.0.1] [--dir DIR] [--plain] [--parent-pid PID]
//
// Prints one JSON line {"endpoint", "pid", "dir"} on stdout once it answers. Without --dir it stores in a new
// temp directory, removed when it stops. It stops on SIGTERM/SIGINT, and by itself once --parent-pid is gone.
//
// s3rver 3.7.1 implements neither ListMultipartUploads nor AbortMultipartUpload (it answers NotImplemented and
// MethodNotAllowed). Unless --plain, this server adds both, over s3rver's own store (an upload is the directory
// <bucket>/._S3rver_uploads/<uploadId>/ with its key; its Initiated time is that directory's mtime), so the
// S3 object store's sweep of abandoned uploads can be tested; and it makes PutObject replace an object whole,
// as S3 does (s3rver writes over the file in place, so two racing puts of one key can leave a mix: atomicPuts).
// `--plain` is s3rver as published.
//
// --openssl-legacy-provider: s3rver encrypts ListObjectsV2 continuation tokens with DES, which OpenSSL 3 (Node
// 17 and later) leaves out by default; without it, every listing of more than one page fails with a 500.
import { createCipheriv } from 'node:crypto';
import { createRequire } from 'node:module';
import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { readdir, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);

/**
 * Starts s3rver. Options: address (default 127.0.0.1), port (default 0: any free one), dir (default: a new temp
 * directory, removed by close()), plain (no upload listing/abort extension). Returns {endpoint, dir, close()}.
 */
export async function startS3Server({ address = '127.0.0.1', port = 0, dir, plain = false } = {}) {
  try {
    createCipheriv('des', Buffer.alloc(8), Buffer.alloc(8));
  } catch {
    throw new Error('s3rver needs DES for its continuation tokens: run node with --openssl-legacy-provider');
  }
  const S3rver = require('s3rver');
  const own = dir === undefined;
  const directory = dir ?? mkdtempSync(join(tmpdir(), 'awc-s3rver-'));
  const server = new S3rver({ address, port, directory, silent: true, vhostBuckets: false });
  if (!plain) {
    addUploadCalls(server);
    atomicPuts(server.store);
  }
  const addr = await server.run();
  return {
    endpoint: `http://${addr.address}:${addr.port}`,
    dir: directory,
    async close() {
      server.httpServer?.closeAllConnections?.(); // (keep-alive connections would hold close() for seconds)
      await server.close().catch(() => undefined);
      if (own) rmSync(directory, { recursive: true, force: true });
    },
  };
}

/**
 * PutObject as S3 does it: the new body replaces the object whole, so two puts of one key racing
 * leave one of the two bodies, never a mix. s3rver 3.7.1 writes the object file in place
 * (createWriteStream over it), so two racing puts interleave; here each body goes to a file of its
 * own beside it, renamed over the object once complete (the ObjectStore contract's concurrent-put
 * test checks it). The rest is s3rver's own putObject (its metadata and md5).
 */
function atomicPuts(store) {
  const crypto = require('node:crypto');
  const fs = require('node:fs');
  const { Transform } = require('node:stream');
  const { pipeline } = require('node:stream/promises');
  store.putObject = async (object) => {
    const objectPath = store.getResourcePath(object.bucket, object.key, 'object');
    await fs.promises.mkdir(join(objectPath, '..'), { recursive: true });
    const tmp = `${objectPath}.awc-put-${crypto.randomBytes(8).toString('hex')}`;
    const md5 = crypto.createHash('md5');
    let size = 0;
    try {
      if (Buffer.isBuffer(object.content)) {
        await fs.promises.writeFile(tmp, object.content);
        md5.update(object.content);
        size = object.content.length;
      } else {
        const count = new Transform({
          transform(chunk, encoding, callback) {
            md5.update(chunk, encoding);
            size += chunk.length;
            callback(null, chunk);
          },
        });
        await pipeline(object.content, count, fs.createWriteStream(tmp));
      }
      await fs.promises.rename(tmp, objectPath);
    } catch (err) {
      await rm(tmp, { force: true });
      throw err;
    }
    const digest = md5.digest('hex');
    await store.putMetadata(object.bucket, object.key, object.metadata, digest);
    return { size, md5: digest };
  };
}

/** ListMultipartUploads (GET /bucket?uploads) and AbortMultipartUpload (DELETE /bucket/key?uploadId=…), before s3rver's router. */
function addUploadCalls(app) {
  const auth = require('s3rver/lib/middleware/authentication')();
  const S3Error = require('s3rver/lib/models/error');
  const calls = async (ctx, next) => {
    const m = /^\/([^/]+)(?:\/(.*))?$/.exec(ctx.path);
    const listing = ctx.method === 'GET' && m && !m[2] && 'uploads' in ctx.query;
    const abort = ctx.method === 'DELETE' && m && m[2] && 'uploadId' in ctx.query;
    if (!listing && !abort) return next();
    const bucket = decodeURIComponent(m[1]);
    const key = m[2] ? decodeURIComponent(m[2]) : undefined;
    ctx.params = { ...ctx.params, bucket, key };
    await auth(ctx, async () => undefined);
    if (!(await ctx.store.getBucket(bucket)))
      throw new S3Error('NoSuchBucket', 'The specified bucket does not exist', { BucketName: bucket });
    const uploads = ctx.store.getResourcePath(bucket, undefined, 'uploads');
    if (abort) {
      const id = String(ctx.query.uploadId);
      const upload = join(uploads, id);
      const owner = /^[0-9a-f]+$/.test(id) ? await readFile(join(upload, 'key'), 'utf8').catch(() => undefined) : undefined;
      if (owner !== key) throw new S3Error('NoSuchUpload', 'The specified upload does not exist.', { UploadId: id });
      await rm(upload, { recursive: true, force: true });
      ctx.status = 204;
      return;
    }
    const prefix = String(ctx.query.prefix ?? '');
    const found = [];
    for (const id of await readdir(uploads).catch(() => [])) {
      const upload = join(uploads, id);
      const k = await readFile(join(upload, 'key'), 'utf8').catch(() => undefined);
      const st = await stat(upload).catch(() => undefined);
      if (k === undefined || st === undefined || !k.startsWith(prefix)) continue;
      found.push({ Key: k, UploadId: id, Initiated: st.mtime.toISOString(), StorageClass: 'STANDARD' });
    }
    found.sort((a, b) => (a.Key < b.Key ? -1 : a.Key > b.Key ? 1 : a.UploadId < b.UploadId ? -1 : 1));
    ctx.body = {
      ListMultipartUploadsResult: {
        Bucket: bucket,
        KeyMarker: '',
        UploadIdMarker: '',
        Prefix: prefix,
        MaxUploads: 1000,
        IsTruncated: false,
        ...(found.length > 0 ? { Upload: found } : {}),
      },
    };
  };
  // s3rver's router is its last middleware; Koa composes the list when the server starts.
  app.middleware.splice(app.middleware.length - 1, 0, calls);
}

function parseArgs(argv) {
  const out = { address: '127.0.0.1', port: 0, dir: undefined, plain: false, parentPid: undefined };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '--port') out.port = Number(value());
    else if (a === '--address') out.address = value();
    else if (a === '--dir') out.dir = value();
    else if (a === '--plain') out.plain = true;
    else if (a === '--parent-pid') out.parentPid = Number(value());
    else throw new Error(`unknown argument ${a}`);
  }
  return out;
}

if (process.argv[1] !== undefined && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const args = parseArgs(process.argv.slice(2));
  const s = await startS3Server(args);
  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    await s.close();
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  if (args.parentPid !== undefined) {
    setInterval(() => {
      try {
        process.kill(args.parentPid, 0);
      } catch {
        void stop();
      }
    }, 1000).unref();
  }
  process.stdout.write(JSON.stringify({ endpoint: s.endpoint, pid: process.pid, dir: s.dir }) + '\n');
}
