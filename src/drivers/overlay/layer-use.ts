import type { Digest } from '../../core/digest.js';

/**
 * Which layers the overlay mounts of this daemon are using right now, for the host sweep
 * (docs/explanation/gc.md#host-local-state). One per OverlayHost, in the daemon's process: the
 * only process that builds layers for mounts.
 *
 * A mount holds its layer's root from the moment it knows the root (before it records the
 * layer snapshot in the catalog and builds the layer) until it has mounted and written the
 * workspace's `state.json`, or failed. A sweep opens a window with {@link beginSweep}: every
 * root held then, and every root a mount takes while the window is open, is *touched* and is
 * not dropped by that sweep, even after its mount finished. {@link mayDrop} is synchronous, so
 * a sweep that checks it and renames the layer away in the same event-loop turn can never race
 * a mount of this process.
 */
export class LayerUse {
  /** Mounts in progress, by layer root. */
  private readonly held = new Map<Digest, number>();
  /** Roots held at some moment since the open sweep began (undefined: no sweep open). */
  private touched: Set<Digest> | undefined;

  /** Holds `root` for one mount; call the returned function once when the mount is done or failed. */
  acquire(root: Digest): () => void {
    this.held.set(root, (this.held.get(root) ?? 0) + 1);
    this.touched?.add(root);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const n = (this.held.get(root) ?? 1) - 1;
      if (n <= 0) this.held.delete(root);
      else this.held.set(root, n);
    };
  }

  /** Opens a sweep window (see class doc); one at a time (a second call restarts it). */
  beginSweep(): void {
    this.touched = new Set(this.held.keys());
  }

  /** Closes the sweep window. */
  endSweep(): void {
    this.touched = undefined;
  }

  /** False when a mount holds `root` now or held it since {@link beginSweep}. */
  mayDrop(root: Digest): boolean {
    return !this.held.has(root) && !(this.touched?.has(root) ?? false);
  }
}
