// Lint rules the tests run (test/repo/lint.test.ts): ESLint's and typescript-eslint's recommended sets.
import js from '@eslint/js';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/', 'node_modules/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { ecmaVersion: 2022, sourceType: 'module', globals: { ...globals.node } },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' }],
    },
  },
  {
    // Functions a reader can hold in mind (issue 25): at most 80 lines (blank lines and comments
    // skipped) and blocks nested at most 4 deep, in src/.
    files: ['src/**/*.ts'],
    rules: {
      'max-lines-per-function': ['error', { max: 80, skipBlankLines: true, skipComments: true }],
      'max-depth': ['error', 4],
    },
  },
  {
    // Tests and benchmarks read the CLI's JSON output untyped.
    files: ['test/**/*.ts', 'bench/**/*.ts', 'smoke/**/*.ts'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
);
