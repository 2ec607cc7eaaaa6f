// The layering rule (test/repo/lint.test.ts runs it): a folder of src/ may import only folders below it.
//   core → config → store → catalog, host → drivers → service → daemon → cli → docs
// catalog and host are siblings and do not import each other. Tests and benchmarks may import anything.
const layers = [['core'], ['config'], ['store'], ['catalog', 'host'], ['drivers'], ['service'], ['daemon'], ['cli'], ['docs']];

const forbidden = [];
layers.forEach((group, rank) => {
  const above = layers.slice(rank + 1).flat();
  for (const layer of group) {
    const siblings = group.filter((g) => g !== layer);
    const banned = [...above, ...siblings];
    if (banned.length === 0) continue;
    forbidden.push({
      name: `${layer}-imports-above`,
      comment: `src/${layer} may import only layers below it (${layers.slice(0, rank).flat().join(', ') || 'none'})`,
      severity: 'error',
      from: { path: `^src/${layer}/` },
      to: { path: `^src/(${banned.join('|')})/` },
    });
  }
});
// Inside a layer, its feature folders in a declared order: a folder may import its own files and the
// folders of earlier ranks; folders of one rank do not import each other. No cycles between folders
// follow. core and config are single rooms. docs/explanation/architecture.md describes each folder.
const features = {
  store: [['object'], ['fs', 's3', 'pack'], ['content'], ['open']],
  catalog: [['port'], ['sql'], ['sqlite', 'postgres'], ['open']],
  host: [['sys'], ['mount'], ['process', 'tree'], ['fuse'], ['read-path']],
  drivers: [['port'], ['copy', 'overlay'], ['detect']],
  service: [
    ['refs'],
    ['capture'],
    ['tar'],
    ['diff', 'kept'],
    ['import'],
    ['export'],
    ['git'],
    ['gc'],
    ['fsck'],
    ['workspace'],
    ['doctor', 'attach', 'claude'],
    ['idle'],
  ],
  daemon: [['metrics'], ['api'], ['warm'], ['supervisor'], ['users'], ['session']],
  cli: [['output'], ['remote'], ['warm'], ['commands', 'demo', 'mcp'], ['entry']],
};
for (const [layer, ranks] of Object.entries(features)) {
  ranks.forEach((group, rank) => {
    const later = ranks.slice(rank + 1).flat();
    for (const folder of group) {
      const banned = [...later, ...group.filter((g) => g !== folder)];
      if (banned.length === 0) continue;
      forbidden.push({
        name: `${layer}-${folder}-imports-later-feature`,
        comment: `src/${layer}/${folder} may import only ${layer}'s earlier feature folders (${ranks.slice(0, rank).flat().join(', ') || 'none'})`,
        severity: 'error',
        from: { path: `^src/${layer}/${folder}/` },
        to: { path: `^src/${layer}/(${banned.join('|')})/` },
      });
    }
  });
}
forbidden.push({
  name: 'no-circular',
  comment: 'no import circles inside src/',
  severity: 'error',
  from: { path: '^src/' },
  to: { circular: true },
});
forbidden.push({
  name: 'src-imports-tests',
  comment: 'src/ never imports tests or benchmarks',
  severity: 'error',
  from: { path: '^src/' },
  to: { path: '^(test|bench)/' },
});

module.exports = {
  forbidden,
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '^(dist|node_modules)/' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
  },
};
