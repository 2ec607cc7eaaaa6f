import { AwcError } from '../../core/errors.js';

/** Most characters (Unicode code points) in a snapshot or workspace name. */
export const MAX_NAME_CHARS = 128;

/** The rule `checkName` enforces, as the hint of its errors. */
export const NAME_RULE = `Names are 1 to ${MAX_NAME_CHARS} characters, without control characters (newlines, tabs…), "/", or spaces at either end; they cannot be "." or "..", start with sn_, ws_ or ns_ (ids), or start with snapshot: or workspace: (ref prefixes).`;

/**
 * Validates a snapshot or workspace name (`what` says which, for the message); null or
 * undefined (no name) passes. Names are refs, so they must not look like the other forms a
 * ref takes (an id, a `snapshot:`/`workspace:` prefix, a path) nor hide characters.
 * @throws E_USAGE with NAME_RULE as the hint
 */
export function checkName(name: string | null | undefined, what: string): void {
  if (name === null || name === undefined) return;
  const bad = (why: string) =>
    new AwcError(
      'E_USAGE',
      `invalid ${what} name ${JSON.stringify(typeof name === 'string' && name.length > 60 ? `${name.slice(0, 60)}…` : name)}: ${why}`,
      { hint: NAME_RULE },
    );
  if (typeof name !== 'string' || name.length === 0) throw bad('it must be a non-empty string');
  if ([...name].length > MAX_NAME_CHARS) throw bad(`it has ${[...name].length} characters, more than ${MAX_NAME_CHARS}`);
  // C0 and C1 controls, DEL, and the Unicode line and paragraph separators
  // eslint-disable-next-line no-control-regex -- matching control characters is the point
  if (/[\u0000-\u001f\u007f-\u009f\u2028\u2029]/.test(name)) throw bad('it holds a control character');
  if (name.includes('/')) throw bad('it holds a "/"');
  if (name === '.' || name === '..') throw bad('it is a path');
  if (/^\s|\s$/.test(name)) throw bad('it starts or ends with a space');
  // refs resolve by id before name, across kinds: a name shaped like any id would be shadowed or shadow one
  if (/^(sn|ws|ns)_/i.test(name)) throw bad('sn_, ws_ and ns_ are reserved for ids');
  if (/^(snapshot|workspace):/i.test(name)) throw bad('snapshot: and workspace: are ref prefixes');
}
