import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { builtinModules, createRequire } from 'node:module';
import path from 'node:path';
import { build } from 'esbuild';
import { appEntry, apps } from '@gantry/testing';

/*
 * Every app's dist/main.js is the whole service in one file (docs/operations.md, "Starting fast"):
 * what it still imports at run time is Node's own modules, or a package that is not installed (an
 * optional one, loaded only when configured). Anything else would be read from dist/ or
 * node_modules at start, one module at a time.
 */

/** Every import of `file` (static, dynamic and require), as esbuild reads them. */
async function importsOf(file: string): Promise<Array<{ path: string; kind: string }>> {
  const result = await build({
    entryPoints: [file],
    bundle: true,
    write: false,
    metafile: true,
    platform: 'node',
    format: 'esm',
    logLevel: 'silent',
    plugins: [{ name: 'nothing-followed', setup: (b) => b.onResolve({ filter: /.*/ }, (a) => (a.kind === 'entry-point' ? undefined : { path: a.path, external: true })) }],
  });
  const input = Object.entries(result.metafile.inputs).find(([name]) => path.resolve(name) === path.resolve(file));
  if (!input) throw new Error(`esbuild did not read ${file}`);
  return input[1].imports.map(({ path: specifier, kind }) => ({ path: specifier, kind }));
}

const builtin = (specifier: string) => specifier.startsWith('node:') || builtinModules.includes(specifier.split('/')[0]!);

const repositoryRoot = path.resolve(path.dirname(appEntry('job-service')), '../../..');
// Each app's entry, and the runner's stand-in agent (started once per job where no claude is installed).
const bundled = [...apps.map((app) => appEntry(app)), path.join(path.dirname(appEntry('runner')), 'stand-in-agent/main.js')];

describe.each(bundled.map((entry) => [path.relative(repositoryRoot, entry), entry]))('%s', (_name, entry) => {
  it('is one bundle: at run time it imports only Node modules and packages that are not installed', async () => {
    const imports = await importsOf(entry);
    const fromDisk = imports.filter((i) => !builtin(i.path));
    const require = createRequire(entry);
    const installed = fromDisk.filter((i) => {
      try {
        require.resolve(i.path);
        return true;
      } catch (error) {
        return (error as { code?: string }).code !== 'MODULE_NOT_FOUND'; // e.g. found, but with no CommonJS entry
      }
    });
    expect(installed).toEqual([]);
    // Read, not vacuous: a bundle imports Node's modules at its top.
    expect(imports.filter((i) => i.kind === 'import-statement' && builtin(i.path)).length).toBeGreaterThan(0);
    expect(fromDisk.every((i) => i.kind === 'dynamic-import' || i.kind === 'require-call')).toBe(true);
  });
});

describe('scripts/bundle.mjs', () => {
  let dir: string;
  beforeAll(() => {
    // Inside the repository, so that the fixture's packages resolve from its node_modules.
    dir = mkdtempSync(path.join(repositoryRoot, 'tools/system-tests/bundle-fixture-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('keeps every name as it is unbundled, with no renaming left in a function that runs per call', async () => {
    const entry = path.join(dir, 'main.js');
    writeFileSync(
      entry,
      [
        // Classes whose names clash in a bundle (esbuild renames them: Client2, DataSource2, …).
        "import pg from 'pg';",
        "import { DataSource } from 'typeorm';",
        "import { JetStreamApiError } from '@nats-io/jetstream';",
        'const arrow = () => 1;',
        'let assigned; assigned = () => 2;',
        'const object = { reply: (d) => d };',
        'class Fields { field = () => 3; static made = () => 4; }',
        "function outer() { const claimOne = (id) => { throw new Error('x' + id); }; function inner() {} return [claimOne, inner]; }",
        'const [perCall, nested] = outer();',
        'let frame = null;',
        "try { perCall(1); } catch (error) { frame = error.stack.split('\\n')[1].trim().split(' ')[1]; }",
        'console.log(JSON.stringify([pg.Client.name, DataSource.name, JetStreamApiError.name, arrow.name, assigned.name, object.reply.name, new Fields().field.name, Fields.made.name, Fields.name, perCall.name, nested.name, frame]));',
      ].join('\n'),
    );
    execFileSync(process.execPath, [path.join(repositoryRoot, 'scripts/bundle.mjs'), entry], { cwd: repositoryRoot });
    const bundle = readFileSync(entry, 'utf8');
    expect(bundle).toContain('var DataSource2 = class'); // a clash was renamed, so the names below are kept, not left
    expect(bundle).toMatch(/const claimOne = (\/\* @__PURE__ \*\/ )?\(id\d*\) =>/); // not wrapped in __name
    const names = JSON.parse(execFileSync(process.execPath, [entry], { encoding: 'utf8' })) as string[];
    expect(names).toEqual(['Client', 'DataSource', 'JetStreamApiError', 'arrow', 'assigned', 'reply', 'field', 'made', 'Fields', 'claimOne', 'inner', 'claimOne']);
  });
});
