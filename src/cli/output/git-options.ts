import { AwcError } from '../../core/errors.js';

/** The options of `awc snapshot import` (commander's parse). */
export interface ImportCliOptions {
  name?: string;
  message?: string;
  allowChanging?: boolean;
  label: string[];
  git?: string;
  rev?: string;
}

/**
 * Checks the arguments of `awc snapshot import`: a source, or `--git <repo>` (with an
 * optional `--rev`), never both and never neither.
 * @throws E_USAGE
 */
export function checkImportSource(source: string | undefined, opts: { git?: string; rev?: string }): void {
  if (opts.git !== undefined && source !== undefined)
    throw new AwcError('E_USAGE', 'pass a source or --git <repo>, not both', {
      hint: 'awc snapshot import --git <repo> [--rev R] [--name N]',
    });
  if (opts.git === undefined && source === undefined)
    throw new AwcError('E_USAGE', 'snapshot import needs a source (a directory or a tar file) or --git <repo>', {
      hint: 'awc snapshot import <dir|file.tar> or awc snapshot import --git <repo> [--rev R]',
    });
  if (opts.git === undefined && opts.rev !== undefined) throw new AwcError('E_USAGE', '--rev goes with --git <repo>');
}
