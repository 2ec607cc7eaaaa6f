import { accessSync, constants, existsSync } from 'node:fs';
import type { AwcConfig } from '../../config/config.js';
import { parseCatalogUrl } from '../../config/backend-url.js';
import type { DoctorCheck } from '../../drivers/port/mount-driver.js';

/**
 * What `awc doctor` says about the home: missing (with an embedded catalog, commands other
 * than `snapshot import` answer E_NO_HOME; with a shared catalog, the first command that
 * needs the host state creates it), read-only, not writable, or writable. Creates nothing.
 */
export function checkHome(config: Pick<AwcConfig, 'home' | 'catalog'>): DoctorCheck {
  const name = 'home';
  const { home } = config;
  const cat = parseCatalogUrl(config.catalog);
  if (cat.kind === 'sqlite' && !existsSync(cat.path))
    return { name, ok: false, detail: `${home}: no AWC home yet (\`awc snapshot import <dir>\` creates it)` };
  if (!existsSync(home)) return { name, ok: true, detail: `${home}: not created yet (the first mount or daemon start creates it)` };
  try {
    accessSync(home, constants.W_OK);
    return { name, ok: true, detail: `${home}: writable` };
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    return { name, ok: false, detail: `${home}: ${code === 'EROFS' ? 'on a read-only file system' : `not writable (${code})`}` };
  }
}
