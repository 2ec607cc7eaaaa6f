import { accessSync, constants, existsSync } from 'node:fs';
import { join } from 'node:path';
import type { DoctorCheck } from '../drivers/mount-driver.js';

/**
 * What `awc doctor` says about the home: missing (commands other than `snapshot import`
 * answer E_NO_HOME), read-only, not writable, or writable. Creates nothing.
 */
export function checkHome(home: string): DoctorCheck {
  const name = 'home';
  if (!existsSync(join(home, 'catalog.sqlite')))
    return { name, ok: false, detail: `${home}: no AWC home yet (\`awc snapshot import <dir>\` creates it)` };
  try {
    accessSync(home, constants.W_OK);
    return { name, ok: true, detail: `${home}: writable` };
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    return { name, ok: false, detail: `${home}: ${code === 'EROFS' ? 'on a read-only file system' : `not writable (${code})`}` };
  }
}
