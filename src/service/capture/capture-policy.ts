import { createHash } from 'node:crypto';
import type { default as IgnoreFactory, Ignore } from 'ignore';
import { lazyRequire } from '../../core/lazy-require.js';
import type { CaptureDirFilter, CaptureVerdict } from '../../core/capture-filter.js';
import { AwcError } from '../../core/errors.js';
import { parseJsonObject } from '../../core/json-object.js';

/** node-ignore, loaded when a capture policy is first built. */
const loadIgnore = lazyRequire<typeof IgnoreFactory>('ignore');
const ignore = (): Ignore => loadIgnore()();

/**
 * Whether node-ignore can match with the gitignore pattern `line`. It compiles a pattern to a
 * regular expression only when it first tests a path, and throws then on what no regular
 * expression takes (a bracket range out of order, as bytes that are not text make, e.g.
 * `[--!]`). git never fails on a pattern; such a pattern matches nothing here.
 */
export function isUsablePattern(line: string): boolean {
  try {
    const one = ignore().add(line);
    one.ignores('x');
    one.ignores('x/y/');
    return true;
  } catch {
    return false;
  }
}

/**
 * A matcher of a workspace's `.gitignore` text (untrusted content): its lines in order, but
 * those node-ignore cannot compile (isUsablePattern), which match nothing as git's would.
 */
export function gitignoreMatcher(text: string): Ignore {
  return ignore().add(text.split(/\r?\n/).filter(isUsablePattern));
}

/**
 * The per-project capture configuration, `.awc.json` at the workspace root
 * (docs/reference/capture-config.md). Every list holds gitignore-style patterns matched
 * against the slash path from the workspace root.
 */
export interface ProjectCaptureConfig {
  /** Patterns of further secret files (added to the built-in filter). */
  secrets: string[];
  /** Paths opted in: secrets that match are stored like any other file. */
  allowSecrets: string[];
  /** Further reconstructible directories (added to the preset). */
  reconstructible: string[];
  /** Further scratch paths (added to the preset). */
  scratch: string[];
  /** false: no built-in reconstructible and scratch presets (the secret filter always applies). */
  presets: boolean;
}

/** The project file's name, at the workspace (or imported directory) root. */
export const PROJECT_FILE = '.awc.json';

/** The built-in secret filter (gitignore syntax): environment files, private keys, credential files. */
export const SECRET_PRESET = [
  '.env',
  '.env.*',
  '!.env.example',
  '!.env.sample',
  '!.env.template',
  '!.env.dist',
  'id_rsa',
  'id_dsa',
  'id_ecdsa',
  'id_ed25519',
  'id_ecdsa_sk',
  'id_ed25519_sk',
  '*.p12',
  '*.pfx',
  '*.jks',
  '*.keystore',
  'credentials.json',
  'client_secret*.json',
  '.netrc',
  '_netrc',
  '.pgpass',
  '.git-credentials',
  '.aws/credentials',
  '.htpasswd',
];

/** Files that are secrets only when their content holds a credential (name → what gives it away). */
const SECRET_BY_CONTENT: Record<string, RegExp> = {
  '.npmrc': /(_authToken|_auth|_password)\s*=/,
  '.yarnrc.yml': /npmAuthToken\s*:/,
  '.pypirc': /^\s*password\s*[=:]/m,
};

/**
 * Extensions of files that may be PEM (docs/explanation/capture-classes.md#pem-files), decided
 * by content (see {@link pemVerdict}): `.pem` and `.key` are secrets unless their content shows
 * PEM blocks and none of them a private key (a CA bundle, a certificate); `.crt`, `.cer` and
 * `.cert` are kept unless their content holds a private key block.
 */
const PEM_SECRET_UNLESS_PUBLIC = new Set(['pem', 'key']);
const PEM_KEPT_UNLESS_KEY = new Set(['crt', 'cer', 'cert']);

/**
 * How much of a PEM file the filter reads (1 MiB: a CA bundle is about 220 KB). A file longer
 * than that is not read to its end, so it is a secret: nothing proves the rest holds no key.
 */
export const PEM_SCAN_BYTES = 1024 * 1024;

/**
 * A PEM block's first line and its label (RFC 7468: `-----BEGIN <label>-----`; a label may hold
 * hyphens and spaces between its characters, as `OPENSSH-PRIVATE KEY`-style labels do).
 */
const PEM_BEGIN = /-----BEGIN ([^\r\n]*?)-----/g;
/**
 * A label that names a private or secret key: any label with PRIVATE or SECRET in it, in any
 * case (`RSA PRIVATE KEY`, `OPENSSH PRIVATE KEY`, `ENCRYPTED PRIVATE KEY`, `EC PRIVATE KEY`,
 * `DSA PRIVATE KEY`, `PGP PRIVATE KEY BLOCK`, and so every label ending in PRIVATE KEY or
 * PRIVATE KEY BLOCK, hyphenated or not).
 */
const PRIVATE_LABEL = /PRIVATE|SECRET/i;
/** A label of a public PEM block (`CERTIFICATE`, `X509 CRL`, `PUBLIC KEY`, …): RFC 7468 label characters, upper case. */
const PUBLIC_LABEL = /^[A-Z0-9](?:[- ]?[A-Z0-9])*$/;

/**
 * What a PEM file's content (its first up to PEM_SCAN_BYTES + 1 bytes) says: `key` when a
 * private key block is in it or it is longer than PEM_SCAN_BYTES (not read whole: unsure),
 * `public` when it holds PEM blocks and none of them a private key, `none` when it holds no
 * PEM block (a DER file, say).
 */
export function pemVerdict(head: Buffer): 'key' | 'public' | 'none' {
  if (head.length > PEM_SCAN_BYTES) return 'key';
  let blocks = 0;
  for (const m of head.toString('latin1').matchAll(PEM_BEGIN)) {
    const label = m[1]!;
    if (PRIVATE_LABEL.test(label)) return 'key';
    if (PUBLIC_LABEL.test(label)) blocks++;
  }
  return blocks > 0 ? 'public' : 'none';
}

/** What in a file's first bytes a content rule can look at: a PEM block, or a word of SECRET_BY_CONTENT's credentials. */
const CONTENT_MARKS = ['-----BEGIN', '_auth', 'npmAuthToken', 'password'];

/**
 * Whether a verdict by content could see anything in `head` (a file's first bytes): a PEM
 * block's first line or a credential's key word. A tar import keeps such heads to judge a
 * later hardlink to the file by the file's content (src/service/tar/import-tar.ts); any other
 * head judges as no bytes at all.
 */
export function judgedByContent(head: Buffer): boolean {
  return CONTENT_MARKS.some((m) => head.includes(m));
}

/** How many bytes of heads a {@link LinkHeads} keeps (64 MiB; past it a hardlink is judged as an empty file, so a PEM name is a secret). */
const LINK_HEADS_BUDGET = 64 * 1024 * 1024;

/**
 * The first bytes of a tar's stored files that a verdict by content could look at
 * ({@link judgedByContent}), kept by file (`K`) to judge a later hardlink to it by the file's
 * content, as a directory import reads the file itself (src/service/tar/import-tar.ts).
 */
export class LinkHeads<K extends object> {
  private readonly heads = new Map<K, Buffer>();
  private bytes = 0;

  /** Keeps (a copy of) `head`, a file's first bytes, when a verdict could see anything in it and the budget allows. */
  keep(file: K, head: Buffer | undefined): void {
    if (!head || this.bytes + head.length > LINK_HEADS_BUDGET || !judgedByContent(head)) return;
    this.heads.set(file, Buffer.from(head));
    this.bytes += head.length;
  }

  /** A verdict's `peek` of `file`'s kept head (no bytes when none was kept). */
  peek(file: K): (max?: number) => Buffer {
    const head = this.heads.get(file) ?? Buffer.alloc(0);
    return (max = 64 * 1024) => head.subarray(0, max);
  }
}

/** Ignored directories that an install or a build recreates: kept (stored), never secret-filtered. */
export const RECONSTRUCTIBLE_PRESET = [
  'node_modules/',
  'target/',
  '.venv/',
  'venv/',
  'dist/',
  'build/',
  '__pycache__/',
  '.tox/',
  '.gradle/',
  '.next/',
  '.turbo/',
];

/** Ignored paths declared disposable: dropped by a checkpoint, never stored. */
export const SCRATCH_PRESET = ['tmp/', '.tmp/', 'temp/', '.cache/', '*.swp'];

/** The class of a stored file (scratch and secrets are what a capture leaves out). */
export type StoredClass = 'durable' | 'reconstructible' | 'ignored';

const KEYS = new Set(['secrets', 'allowSecrets', 'reconstructible', 'scratch', 'presets']);

/**
 * Parses and validates `.awc.json` text (undefined: no file, the defaults).
 * @throws E_CONFIG (not JSON, not an object, an unknown key, a list that is not of strings, a bad pattern)
 */
export function parseProjectConfig(text: string | undefined): ProjectCaptureConfig {
  const cfg: ProjectCaptureConfig = { secrets: [], allowSecrets: [], reconstructible: [], scratch: [], presets: true };
  if (text === undefined) return cfg;
  const bad = (why: string): AwcError =>
    new AwcError('E_CONFIG', `${PROJECT_FILE}: ${why}`, {
      hint: `Fix ${PROJECT_FILE} at the workspace root: an object with the lists "secrets", "allowSecrets", "reconstructible", "scratch" (gitignore patterns) and "presets" (true/false); see docs/reference/capture-config.md.`,
      details: { file: PROJECT_FILE },
    });
  const v = parseJsonObject(text, bad);
  for (const [k, val] of Object.entries(v)) {
    if (!KEYS.has(k)) throw bad(`unknown key ${JSON.stringify(k)}`);
    if (k === 'presets') {
      if (typeof val !== 'boolean') throw bad('"presets" must be true or false');
      cfg.presets = val;
      continue;
    }
    if (!Array.isArray(val) || !val.every((p) => typeof p === 'string' && p.trim() !== '' && !p.includes('\0')))
      throw bad(`${JSON.stringify(k)} must be a list of non-empty gitignore patterns`);
    const unusable = (val as string[]).find((p) => !isUsablePattern(p));
    if (unusable !== undefined)
      throw bad(`${JSON.stringify(k)}: ${JSON.stringify(unusable)} is not a gitignore pattern this can match with`);
    cfg[k as 'secrets'] = val as string[];
  }
  return cfg;
}

/** Options of a CapturePolicy: whether scratch paths are dropped (checkpoints) or stored (imports). */
export interface CapturePolicyOptions {
  dropScratch: boolean;
}

/**
 * The rules of one capture, from the project configuration (docs/explanation/capture-classes.md):
 * gitignore semantics by the `ignore` package (the matcher eslint and prettier use; it
 * reads the workspace's own `.gitignore` files as the walk meets them).
 */
export class CapturePolicy {
  readonly secrets: Ignore;
  readonly allowed: Ignore;
  readonly reconstructible: Ignore;
  readonly scratch: Ignore;

  constructor(
    readonly config: ProjectCaptureConfig,
    readonly opts: CapturePolicyOptions,
  ) {
    this.secrets = ignore().add(SECRET_PRESET).add(config.secrets);
    this.allowed = ignore().add(config.allowSecrets);
    this.reconstructible = ignore()
      .add(config.presets ? RECONSTRUCTIBLE_PRESET : [])
      .add(config.reconstructible);
    this.scratch = ignore()
      .add(config.presets ? SCRATCH_PRESET : [])
      .add(config.scratch);
  }

  /**
   * Whether the file at `path` is a secret: by name, or for a few credential files and PEM
   * files (`.pem`, `.key`, `.crt`, `.cer`, `.cert`: {@link pemVerdict}) by content. `peek(max)`
   * gives the file's first up to `max` bytes (default 64 KiB).
   */
  isSecret(path: string, peek: (max?: number) => Buffer): boolean {
    if (this.secrets.ignores(path)) return true;
    const name = path.slice(path.lastIndexOf('/') + 1);
    const re = SECRET_BY_CONTENT[name];
    if (re !== undefined) return re.test(peek().toString('utf8'));
    const dot = name.lastIndexOf('.');
    const ext = dot > 0 ? name.slice(dot + 1).toLowerCase() : '';
    if (PEM_SECRET_UNLESS_PUBLIC.has(ext)) return pemVerdict(peek(PEM_SCAN_BYTES + 1)) !== 'public';
    if (PEM_KEPT_UNLESS_KEY.has(ext)) return pemVerdict(peek(PEM_SCAN_BYTES + 1)) === 'key';
    return false;
  }

  /**
   * What names everything a regular file's verdict depends on besides its path and content
   * (CaptureFilter.verdictsKey): the configuration and the built-in rules. Undefined when
   * scratch is dropped (a verdict then also depends on the walk's `.gitignore` files).
   */
  verdictsKey(): string | undefined {
    if (this.opts.dropScratch) return undefined;
    const rules = {
      v: 1, // raise when PolicyDir.verdict decides otherwise
      config: this.config,
      secrets: SECRET_PRESET,
      byContent: Object.entries(SECRET_BY_CONTENT).map(([k, re]) => [k, re.source, re.flags]),
      pem: [[...PEM_SECRET_UNLESS_PUBLIC], [...PEM_KEPT_UNLESS_KEY], PEM_SCAN_BYTES],
      reconstructible: RECONSTRUCTIBLE_PRESET,
    };
    return createHash('sha256').update(JSON.stringify(rules)).digest('hex').slice(0, 32);
  }

  /** The root directory's filter, given the root's `.gitignore` text. */
  root(gitignore: string | undefined): PolicyDir {
    return new PolicyDir(this, '', gitignore ? [{ base: '', ig: gitignoreMatcher(gitignore) }] : [], null, false);
  }
}

/**
 * The `.git` file of a workspace registered as a worktree of a repository elsewhere
 * (`git worktree add`'s, as the Claude Code hook writes it): one line naming the worktree's
 * administrative directory. A checkpoint keeps the base's `.git` in its place (verdict `base`).
 */
const WORKTREE_GITFILE = /^gitdir: \/[^\n]*\/worktrees\/[^/\n]+\n?$/;

/** A `.gitignore` met by the walk and the directory it applies to. */
interface Level {
  base: string;
  ig: Ignore;
}

/**
 * The policy as one directory sees it: its `.gitignore` chain, and once the walk is inside
 * an ignored directory, the class of everything below (git does not re-include below an
 * ignored directory, and reads no `.gitignore` there).
 */
export class PolicyDir implements CaptureDirFilter {
  constructor(
    private readonly p: CapturePolicy,
    readonly rel: string,
    private readonly chain: Level[],
    private readonly fixed: 'reconstructible' | 'ignored' | null,
    /** Inside a reconstructible directory (by pattern, ignored or not): never secret-filtered. */
    private readonly inReconstructible: boolean,
  ) {}

  private pathOf(name: string): string {
    return this.rel === '' ? name : `${this.rel}/${name}`;
  }

  /** Whether the workspace's `.gitignore` files ignore `path` (the deepest rule that matches wins). */
  private ignored(path: string, isDir: boolean): boolean {
    let out = false;
    for (const { base, ig } of this.chain) {
      const sub = base === '' ? path : path.slice(base.length + 1);
      const t = ig.test(isDir ? `${sub}/` : sub);
      if (t.ignored) out = true;
      else if (t.unignored) out = false;
    }
    return out;
  }

  verdict(name: string, isDir: boolean, peek: (max?: number) => Buffer): CaptureVerdict {
    if (this.rel === '' && name === '.git' && !isDir && this.p.opts.dropScratch && WORKTREE_GITFILE.test(peek(4096).toString('latin1')))
      return 'base';
    const path = this.pathOf(name);
    if (this.inReconstructible || this.fixed === 'reconstructible') return 'store';
    if (!isDir && this.p.isSecret(path, peek) && !this.p.allowed.ignores(path)) return 'secret';
    if (isDir && this.p.reconstructible.ignores(`${path}/`)) return 'store';
    if (this.fixed !== null || !this.p.opts.dropScratch) return 'store';
    const key = isDir ? `${path}/` : path;
    return this.p.scratch.ignores(key) && this.ignored(path, isDir) ? 'scratch' : 'store';
  }

  /** The class of stored entry `name` (for the counts of a checkpoint's result). */
  classOf(name: string, isDir: boolean): StoredClass {
    if (this.fixed !== null) return this.fixed;
    const path = this.pathOf(name);
    if (!this.ignored(path, isDir)) return 'durable';
    return this.p.reconstructible.ignores(isDir ? `${path}/` : path) ? 'reconstructible' : 'ignored';
  }

  async child(name: string, gitignore: () => Promise<string | undefined>): Promise<PolicyDir> {
    const path = this.pathOf(name);
    const inRecon = this.inReconstructible || this.p.reconstructible.ignores(`${path}/`);
    if (this.fixed !== null) return new PolicyDir(this.p, path, this.chain, this.fixed, inRecon);
    const cls = this.classOf(name, true);
    if (cls !== 'durable') return new PolicyDir(this.p, path, [], cls, inRecon);
    const text = await gitignore();
    const chain = text ? [...this.chain, { base: path, ig: gitignoreMatcher(text) }] : this.chain;
    return new PolicyDir(this.p, path, chain, null, inRecon);
  }
}
