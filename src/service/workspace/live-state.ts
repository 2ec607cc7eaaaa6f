import type { Digest } from '../../core/digest.js';
import { AwcError } from '../../core/errors.js';
import type { WorkspaceRow } from '../../catalog/port/catalog.js';
import type { ContentReader } from '../../store/content/content-reader.js';
import type { ContentWriter } from '../../store/content/content-writer.js';
import type { MountDriver, MountDriverName } from '../../drivers/port/mount-driver.js';
import type { WorkspaceHostState } from '../../drivers/port/workspace-state.js';
import { CaptureRecorder } from '../capture/capture-classes.js';
import { Keeper, type KeptFile } from '../kept/kept-files.js';
import { SecretDigests, type LiveLeftOut } from '../diff/diff-secrets.js';

/** What a discard reports of its keeping pass (each field only when not empty). */
export interface KeptFields {
  /** Secret files that existed nowhere else, kept on this host (`awc kept`). */
  kept?: KeptFile[];
}

/** What LiveState needs of the service (`Awc`). */
export interface LiveStateDeps {
  drivers: Record<MountDriverName, MountDriver>;
  paths: { workspaces: string };
  reader(): ContentReader;
  /** A dry-run writer (stores nothing). */
  dryWriter(): ContentWriter;
  /** The root of a workspace's head snapshot. */
  headRoot(ws: WorkspaceRow): Promise<Digest>;
}

/**
 * A workspace's live state on this host, as its driver scans it through the capture filter
 * (docs/explanation/capture-classes.md): its root, whether it differs from the head, and
 * keeping its secrets before the host state is dropped.
 */
export class LiveState {
  constructor(private readonly deps: LiveStateDeps) {}

  /** A capture filter for a checkpoint-like walk (scratch dropped); `keep` gets each secret. */
  capture(keep?: Pick<Keeper, 'keep'>): CaptureRecorder {
    return new CaptureRecorder(this.deps.reader(), {
      dropScratch: true,
      keep: keep?.keep.bind(keep),
    });
  }

  /** Root digest of a workspace's live state (a scan by its driver through `filter`) when it has host state here, else its head's. */
  async root(ws: WorkspaceRow, state: WorkspaceHostState | undefined, writer?: ContentWriter, filter = this.capture()): Promise<Digest> {
    if (!state) return this.deps.headRoot(ws);
    return (await this.deps.drivers[state.driver].scan(state, writer ?? this.deps.dryWriter(), { filter })).root;
  }

  /**
   * As `root`, with what the scan left out (the secrets with their content digests, the
   * dropped scratch) when it scanned a host state (`awc diff` of a live workspace).
   */
  async rootAndLeftOut(
    ws: WorkspaceRow,
    state: WorkspaceHostState | undefined,
    writer: ContentWriter,
  ): Promise<{ root: Digest; leftOut?: LiveLeftOut }> {
    if (!state) return { root: await this.deps.headRoot(ws) };
    const digests = new SecretDigests();
    const rec = this.capture(digests);
    const root = await this.root(ws, state, writer, rec);
    const secrets = rec.report.secrets.map((s) => ({ ...s, digest: digests.of(s.path) }));
    return { root, leftOut: { secrets, dropped: rec.report.dropped } };
  }

  /** Whether the host state holds what the head does not: changes, or (with `secrets`) files the secret filter left out. */
  async changed(ws: WorkspaceRow, state: WorkspaceHostState, secrets: boolean): Promise<boolean> {
    const rec = this.capture();
    const root = await this.root(ws, state, undefined, rec);
    return root !== (await this.deps.headRoot(ws)) || (secrets && rec.report.secrets.length > 0);
  }

  /**
   * Copies the secret files of a workspace's host state into a kept set (see Keeper) and
   * returns them (names of any bytes, src/core/raw-name.ts). @throws E_CONFIG, E_NO_SPACE…
   */
  async keepSecrets(ws: WorkspaceRow, state: WorkspaceHostState): Promise<KeptFields> {
    const keeper = new Keeper(this.deps.paths, ws, Date.now(), state.owner);
    try {
      await this.deps.drivers[state.driver].scan(state, this.deps.dryWriter(), { filter: this.capture(keeper) });
    } catch (err) {
      // the host state's files are gone (a lost upper or copy): nothing is left here to lose
      if (!(err instanceof AwcError && err.code === 'E_SOURCE_NOT_FOUND')) throw err;
    }
    const kept = keeper.finish();
    return kept.length > 0 ? { kept } : {};
  }
}
