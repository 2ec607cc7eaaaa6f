import { AwcError } from '../../core/errors.js';

/**
 * Labels: small string key=value pairs on snapshots and workspaces (migration 0004_labels),
 * as Kubernetes labels: tools find their own objects by them (`awc ls --label k=v`). Keys
 * under `awc.` are AWC's own (`awc.git.origin`, `awc.env-key`, `awc.claude.session`, …).
 * Stored as one JSON object per row (text column `labels`, keys sorted).
 */
export type Labels = Readonly<Record<string, string>>;

/** A change to labels: a string sets the key, null deletes it. */
export type LabelPatch = Readonly<Record<string, string | null>>;

/** Most labels on one row. */
export const MAX_LABELS = 64;
/** Most characters in a label value. */
export const MAX_LABEL_VALUE_CHARS = 1024;
/** A label key: 1–63 of `a-z 0-9 . _ / -`, starting with a letter or digit. */
const LABEL_KEY = /^[a-z0-9][a-z0-9._/-]{0,62}$/;

/** The rule `checkLabels` enforces, as the hint of its errors. */
export const LABEL_RULE = `Label keys are 1 to 63 of a-z, 0-9, ".", "_", "/", "-", starting with a letter or digit; values are at most ${MAX_LABEL_VALUE_CHARS} characters without control characters; at most ${MAX_LABELS} labels.`;

function bad(message: string): AwcError {
  return new AwcError('E_USAGE', message, { hint: LABEL_RULE });
}

/**
 * Validates one label key and, when given, its value.
 * @throws E_USAGE with LABEL_RULE as the hint
 */
export function checkLabel(key: string, value?: string | null): void {
  if (typeof key !== 'string' || !LABEL_KEY.test(key)) throw bad(`invalid label key ${JSON.stringify(key)}`);
  if (value === undefined || value === null) return;
  if (typeof value !== 'string') throw bad(`label ${key}: the value must be a string`);
  if ([...value].length > MAX_LABEL_VALUE_CHARS) throw bad(`label ${key}: the value is longer than ${MAX_LABEL_VALUE_CHARS} characters`);
  // eslint-disable-next-line no-control-regex -- matching control characters is the point
  if (/[\u0000-\u001f\u007f-\u009f\u2028\u2029]/.test(value)) throw bad(`label ${key}: the value holds a control character`);
}

/**
 * Validates a whole label set (keys, values, count) and returns it with sorted keys.
 * @throws E_USAGE
 */
export function checkLabels(labels: Record<string, string> | undefined): Labels {
  if (labels === undefined) return {};
  if (typeof labels !== 'object' || labels === null || Array.isArray(labels)) throw bad('labels must be an object of strings');
  const keys = Object.keys(labels).sort();
  if (keys.length > MAX_LABELS) throw bad(`${keys.length} labels, more than ${MAX_LABELS}`);
  const out: Record<string, string> = {};
  for (const k of keys) {
    const v = labels[k];
    if (typeof v !== 'string') throw bad(`label ${k}: the value must be a string`);
    checkLabel(k, v);
    out[k] = v;
  }
  return out;
}

/**
 * `labels` with `patch` applied (a string sets, null deletes), validated, keys sorted.
 * @throws E_USAGE
 */
export function applyLabelPatch(labels: Labels, patch: LabelPatch): Labels {
  if (typeof patch !== 'object' || patch === null || Array.isArray(patch)) throw bad('a label change must be an object');
  const next: Record<string, string> = { ...labels };
  for (const [k, v] of Object.entries(patch)) {
    checkLabel(k, v);
    if (v === null) delete next[k];
    else next[k] = v;
  }
  return checkLabels(next);
}

/** True when `labels` has every key of `filter` with the same value (an empty filter matches all). */
export function matchesLabels(labels: Labels, filter: Labels | undefined): boolean {
  if (!filter) return true;
  return Object.entries(filter).every(([k, v]) => labels[k] === v);
}

/** The column's text for `labels` (JSON, keys sorted). */
export function labelsToText(labels: Labels | undefined): string {
  return JSON.stringify(checkLabels(labels as Record<string, string> | undefined));
}

/** The labels stored in a column (a malformed or missing value reads as none: the column is AWC's own). */
export function labelsFromText(text: string | null | undefined): Labels {
  if (!text) return {};
  try {
    const v = JSON.parse(text) as unknown;
    if (typeof v !== 'object' || v === null || Array.isArray(v)) return {};
    return Object.fromEntries(Object.entries(v).filter(([, x]) => typeof x === 'string')) as Labels;
  } catch {
    return {};
  }
}

/**
 * Parses CLI label arguments: `k=v` sets, `k-` deletes (as `kubectl label`). With
 * `allowDelete` false only `k=v` is accepted.
 * @throws E_USAGE
 */
export function parseLabelArgs(args: readonly string[], allowDelete = true): Record<string, string | null> {
  const out: Record<string, string | null> = {};
  for (const a of args) {
    const eq = a.indexOf('=');
    if (eq > 0) {
      const k = a.slice(0, eq);
      checkLabel(k, a.slice(eq + 1));
      out[k] = a.slice(eq + 1);
    } else if (allowDelete && a.endsWith('-') && a.length > 1) {
      checkLabel(a.slice(0, -1));
      out[a.slice(0, -1)] = null;
    } else {
      throw bad(`invalid label ${JSON.stringify(a)}: use key=value${allowDelete ? ' to set or key- to remove' : ''}`);
    }
  }
  return out;
}
