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

describe.each(apps)('%s: dist/main.js', (app) => {
  it('is one bundle: at run time it imports only Node modules and packages that are not installed', async () => {
    const entry = appEntry(app);
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
