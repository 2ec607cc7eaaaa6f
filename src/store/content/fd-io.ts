/** File descriptor helpers of the content writer (src/store/content/content-writer.ts). */
import * as fs from 'node:fs';
import type { BigIntStats } from 'node:fs';
import { AwcError, toAwcError } from '../../core/errors.js';

// Descriptor calls as promises (fs/promises works on FileHandles only).
/** open(2) as a promise. */
export function openFd(path: string, flags: number): Promise<number> {
  return new Promise((res, rej) => fs.open(path, flags, (err, fd) => (err ? rej(err) : res(fd))));
}

/** close(2) as a promise. */
export function closeFd(fd: number): Promise<void> {
  return new Promise((res, rej) => fs.close(fd, (err) => (err ? rej(err) : res())));
}

/** fstat(2) with bigint fields, as a promise. */
export function fstatBig(fd: number): Promise<BigIntStats> {
  return new Promise((res, rej) => fs.fstat(fd, { bigint: true }, (err, st) => (err ? rej(err) : res(st))));
}

/** Reads into `buf` from file offset `position` until it is full or the file ends; returns the bytes read. */
export async function readFully(fd: number, buf: Buffer, position: number): Promise<number> {
  let got = 0;
  while (got < buf.length) {
    const n = await new Promise<number>((res, rej) =>
      fs.read(fd, buf, got, buf.length - got, position + got, (err, bytesRead) => (err ? rej(err) : res(bytesRead))),
    );
    if (n === 0) break;
    got += n;
  }
  return got;
}

/** Same size, mtime, ctime, inode and device. */
export function sameFile(a: BigIntStats, b: BigIntStats): boolean {
  return a.size === b.size && a.mtimeNs === b.mtimeNs && a.ctimeNs === b.ctimeNs && a.ino === b.ino && a.dev === b.dev;
}

/** An open error as an AwcError: E_SOURCE_NOT_FOUND, E_UNSUPPORTED (a directory), else mapped by errno. */
export function sourceError(err: unknown, path: string): AwcError {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'ENOENT' || code === 'ENOTDIR') return new AwcError('E_SOURCE_NOT_FOUND', `${path} does not exist`, { cause: err });
  if (code === 'EISDIR') return new AwcError('E_UNSUPPORTED', `${path} is not a regular file`, { cause: err });
  return toAwcError(err);
}
