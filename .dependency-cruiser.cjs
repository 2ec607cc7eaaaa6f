// The layering rule (test/lint.test.ts runs it): a folder of src/ may import only folders below it.
//   core → config → store → catalog, host → drivers → service → daemon → cli
// catalog and host are siblings and do not import each other. Tests and benchmarks may import anything.
const layers = [['core'], ['config'], ['store'], ['catalog', 'host'], ['drivers'], ['service'], ['daemon'], ['cli']];

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
