import type { IncomingMessage } from 'node:http';
import { AwcError } from '../../core/errors.js';
import { DEFAULT_DAEMON_LIMITS } from '../../config/daemon-limits.js';

/** How long a body that does not fit the budget waits for room before it is refused (ms). */
export const BODY_WAIT_MS = 1000;

/**
 * One byte budget for every request body the daemon holds in memory at once
 * (`requestBodyBudgetBytes`; docs/explanation/security.md "Per-user resource caps"), all
 * callers together, and at most a quarter of it for any one caller (a user's uid, or the
 * root API socket), so one caller filling its share leaves room for everybody else.
 */
export class BodyBudget {
  private used = 0;
  private readonly byOwner = new Map<string, number>();
  private waiters: (() => void)[] = [];

  constructor(private total: number = DEFAULT_DAEMON_LIMITS.requestBodyBudgetBytes) {}

  /** Sets the total (bytes; the daemon's configuration at start). */
  configure(total: number): void {
    this.total = total;
  }

  /** Bytes held now, all owners together. */
  get held(): number {
    return this.used;
  }

  /** The most one owner may hold (bytes): a quarter of the total. */
  get share(): number {
    return Math.floor(this.total / 4);
  }

  /**
   * Takes `n` bytes for `owner`, waiting up to `waitMs` for room.
   * @throws E_TOO_MANY naming the budget (details `{cap, value}`) when they do not fit by then
   */
  async take(owner: string, n: number, waitMs = BODY_WAIT_MS): Promise<void> {
    const deadline = Date.now() + waitMs;
    while (!this.fits(owner, n)) {
      const left = deadline - Date.now();
      if (left <= 0 || n > this.share) throw this.refusal(owner, n);
      await new Promise<void>((r) => {
        const t = setTimeout(done, left);
        function done(): void {
          clearTimeout(t);
          r();
        }
        this.waiters.push(done);
      });
    }
    this.used += n;
    this.byOwner.set(owner, (this.byOwner.get(owner) ?? 0) + n);
  }

  /** Gives back `n` bytes of `owner` (a body parsed, refused or abandoned). */
  give(owner: string, n: number): void {
    if (n <= 0) return;
    this.used -= n;
    const left = (this.byOwner.get(owner) ?? 0) - n;
    if (left > 0) this.byOwner.set(owner, left);
    else this.byOwner.delete(owner);
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  private fits(owner: string, n: number): boolean {
    return this.used + n <= this.total && (this.byOwner.get(owner) ?? 0) + n <= this.share;
  }

  private refusal(owner: string, n: number): AwcError {
    const mine = (this.byOwner.get(owner) ?? 0) + n > this.share;
    const [cap, value] = mine ? ['requestBodyBudgetBytes / 4', this.share] : ['requestBodyBudgetBytes', this.total];
    return new AwcError('E_TOO_MANY', `request bodies in flight over the daemon's budget (${cap}: ${value} bytes)`, {
      hint: mine
        ? `Too many of your requests are sending bodies at once; wait for some to finish, then try again; the limit is a quarter of requestBodyBudgetBytes (${value} bytes) in the root home's config.json.`
        : `The daemon holds as many request bodies as it may (requestBodyBudgetBytes, ${value} bytes, in the root home's config.json); try again in a moment.`,
      details: { cap, value },
    });
  }
}

/** The daemon's one body budget (configured at start; see HostDaemon). */
export const bodyBudget = new BodyBudget();

const owners = new WeakMap<IncomingMessage, string>();

/** Says whose body `req` carries (a per-user socket tags its requests with the user's uid). */
export function tagBodyOwner(req: IncomingMessage, owner: string): void {
  owners.set(req, owner);
}

/** Whose body `req` carries: the tag, else `api` (the root API socket). */
export function bodyOwnerOf(req: IncomingMessage): string {
  return owners.get(req) ?? 'api';
}
