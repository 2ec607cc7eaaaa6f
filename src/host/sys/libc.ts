import { createRequire } from 'node:module';

/** libc through koffi: declare a function by its C signature, and read errno after a call. */
export interface Libc {
  func(signature: string): unknown;
  errno(): number;
}

let libc: Libc | null | undefined;
let loadError = '';

/**
 * libc.so.6 through koffi (a maintained FFI package shipping prebuilt binaries), loaded once
 * on first use, for the system calls Node has no binding for (ioctl, utimensat…).
 * @returns null when koffi or libc cannot load here (see {@link libcLoadError})
 */
export function loadLibc(): Libc | null {
  if (libc !== undefined) return libc;
  try {
    const koffi = createRequire(import.meta.url)('koffi') as { load(name: string): { func(sig: string): unknown }; errno(): number };
    const lib = koffi.load('libc.so.6');
    libc = { func: (sig) => lib.func(sig), errno: () => koffi.errno() };
  } catch (err) {
    loadError = String(err);
    libc = null;
  }
  return libc;
}

/** Why {@link loadLibc} returned null ('' when it did not). */
export function libcLoadError(): string {
  return loadError;
}
