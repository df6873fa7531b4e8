// ESLint for the whole repository: `npm run lint`, and a step of `npm test`. The type-aware rules
// read the root tsconfig.json as one program, so a full run costs about one type check.
import tseslint from 'typescript-eslint';

/*
 * The domain boundary (docs/DEVELOPING.md, "Toolchain"): a file under a `domain/` folder imports only
 * @gantry/contracts and files of its own domain folder — no NestJS, pg, nats, git, parsers or
 * another layer of its app. `no-restricted-imports` matches import strings, not resolved files,
 * so "its own folder" is spelled per depth: a file n folders below `domain/` may climb n `../`.
 * Specifications and their fixtures (`*.spec.ts`, `domain/testing/`) may also use the test
 * libraries.
 */
const DOMAIN_DEPTHS = [0, 1, 2, 3];
const TEST_LIBRARIES = ['@gantry/testing', '@gantry/eventstore/testing'];

function domainImports(depth, allowed) {
  const escape = (name) => name.replace(/[/.]/g, '\\$&');
  const packages = allowed.map(escape).join('|');
  return {
    patterns: [
      {
        regex: `^(?!\\.|(${packages})$)`,
        message: 'A domain file imports only @gantry/contracts and its own domain folder (docs/DEVELOPING.md).',
      },
      {
        regex: `^(\\.\\./){${depth + 1},}`,
        message: 'A domain file imports only its own domain folder, not another layer of its app (docs/DEVELOPING.md).',
      },
    ],
  };
}

const domainFiles = (depth) => [`**/domain/${'*/'.repeat(depth)}*.ts`];
const testFiles = (depth) => [`**/domain/${'*/'.repeat(depth)}*.spec.ts`, ...(depth > 0 ? [`**/domain/testing/${'*/'.repeat(depth - 1)}*.ts`] : [])];

export default tseslint.config(
  { ignores: ['**/node_modules/**', '**/dist/**', '**/coverage/**', '.gantry/**'] },
  {
    files: ['**/*.ts'],
    languageOptions: {
      parser: tseslint.parser,
      parserOptions: { project: './tsconfig.json', tsconfigRootDir: import.meta.dirname },
    },
    linterOptions: { reportUnusedDisableDirectives: 'error' },
    plugins: { '@typescript-eslint': tseslint.plugin },
    rules: {
      // A promise nobody awaits or catches fails unseen; `void` alone does not count as handling it.
      '@typescript-eslint/no-floating-promises': ['error', { ignoreVoid: false }],
      '@typescript-eslint/no-misused-promises': 'error',
      'no-control-regex': 'error',
    },
  },
  ...DOMAIN_DEPTHS.flatMap((depth) => [
    { files: domainFiles(depth), rules: { 'no-restricted-imports': ['error', domainImports(depth, ['@gantry/contracts'])] } },
    { files: testFiles(depth), rules: { 'no-restricted-imports': ['error', domainImports(depth, ['@gantry/contracts', ...TEST_LIBRARIES])] } },
  ]),
);
