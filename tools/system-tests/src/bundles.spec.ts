import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { builtinModules, createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { build } from 'esbuild';
import { appEntry, apps } from '@gantry/testing';

/*
 * Every app's dist/main.bundle.cjs is the whole service in one file, and dist/main.js the launcher that
 * runs it with V8's code cache (docs/operations.md, "Starting fast"): what the bundle still loads at
 * run time is Node's own modules, or a package that is not installed (an optional one, loaded only
 * when configured). Anything else would be read from dist/ or node_modules at start, one module at a
 * time.
 */

/** Every import of `file` (static, dynamic, require and require.resolve), as esbuild reads them. */
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
  // `<runtime>` is esbuild's own helpers (it wraps a CommonJS file it reads), not a file.
  return input[1].imports.filter((i) => i.path !== '<runtime>').map(({ path: specifier, kind }) => ({ path: specifier, kind }));
}

const builtin = (specifier: string) => specifier.startsWith('node:') || builtinModules.includes(specifier.split('/')[0]!);

const repositoryRoot = path.resolve(path.dirname(appEntry('job-service')), '../../..');
// Each app's entry, and the runner's stand-in agent (started once per job where no claude is installed).
const bundled = [...apps.map((app) => appEntry(app)), path.join(path.dirname(appEntry('runner')), 'stand-in-agent/main.js')];

const bundleOf = (entry: string) => entry.replace(/\.js$/, '.bundle.cjs');

/** The opening of the function expression a bundle file is: what the launcher passes its code. */
const WRAPPER_OPEN = '(function (exports, require, module, __filename, __dirname, __bundleImportMeta) {';

/**
 * The imports of a bundle's code. The file is one function expression whose parameters include
 * `require`, and esbuild takes no call of a parameter for an import: so its code is read without it.
 */
async function importsOfBundle(entry: string): Promise<Array<{ path: string; kind: string }>> {
  const text = readFileSync(bundleOf(entry), 'utf8');
  expect(text.startsWith(`${WRAPPER_OPEN}"use strict";`)).toBe(true);
  expect(text.endsWith('\n})')).toBe(true);
  const dir = mkdtempSync(path.join(tmpdir(), 'bundle-code-'));
  try {
    const file = path.join(dir, 'code.cjs');
    writeFileSync(file, text.slice(WRAPPER_OPEN.length, -'\n})'.length));
    return await importsOf(file);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe.each(bundled.map((entry) => [path.relative(repositoryRoot, entry), entry]))('%s', (_name, entry) => {
  it('is a launcher that imports only Node modules', async () => {
    const imports = await importsOf(entry);
    expect(imports.length).toBeGreaterThan(0);
    expect(imports.filter((i) => !builtin(i.path))).toEqual([]);
  });

  it('starts one bundle: at run time it loads only Node modules and packages that are not installed', async () => {
    const imports = (await importsOfBundle(entry)).filter((i) => i.kind !== 'require-resolve'); // a look whether a package is there loads nothing
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
    // Read, not vacuous: a bundle requires Node's modules.
    expect(imports.filter((i) => i.kind === 'require-call' && builtin(i.path)).length).toBeGreaterThan(0);
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
    const bundle = readFileSync(bundleOf(entry), 'utf8');
    expect(bundle).toContain('var DataSource2 = class'); // a clash was renamed, so the names below are kept, not left
    expect(bundle).toMatch(/const claimOne = (\/\* @__PURE__ \*\/ )?\(id\d*\) =>/); // not wrapped in __name
    const names = JSON.parse(execFileSync(process.execPath, [entry], { encoding: 'utf8' })) as string[];
    expect(names).toEqual(['Client', 'DataSource', 'JetStreamApiError', 'arrow', 'assigned', 'reply', 'field', 'made', 'Fields', 'claimOne', 'inner', 'claimOne']);
  });

  it('writes an ASCII bundle: what is not ASCII in a comment or a regular expression is escaped and means the same; a template literal keeps its raw text', async () => {
    const entry = path.join(dir, 'ascii.js');
    writeFileSync(
      entry,
      [
        // esbuild keeps comments in a class body or an object literal.
        'class Units {',
        '  /** A comment with a dash — and a µ. */',
        '  static pattern = () => units;',
        '}',
        "const units = /(\\d+)(ns|µs|ms)/;",
        "const unicode = /[é😀]/u;",
        "const text = 'naïve';",
        'const raw = String.raw`→`;',
        "console.log(JSON.stringify([Units.pattern().exec('5µs')?.[2], unicode.test('😀'), unicode.test('e'), text, raw, raw.length]));",
      ].join('\n'),
    );
    const build = execFileSync(process.execPath, [path.join(repositoryRoot, 'scripts/bundle.mjs'), entry], { cwd: repositoryRoot, encoding: 'utf8' });
    const bundle = readFileSync(bundleOf(entry), 'utf8');
    // Only the template literal's arrow is left, and the build says so.
    expect([...bundle].filter((c) => c.charCodeAt(0) > 0x7f)).toEqual(['→']);
    expect(build).toContain('not ASCII: 1 characters in template literals');
    expect(bundle).toContain('\\u2014'); // the comment's dash, as text
    expect(JSON.parse(execFileSync(process.execPath, [entry], { encoding: 'utf8' }))).toEqual(['µs', true, false, 'naïve', '→', 1]);
  });

  it('refuses to bundle a regular expression that escapes a character that is not ASCII (its escape would change what it means)', () => {
    const entry = path.join(dir, 'escaped.js');
    writeFileSync(entry, "console.log(/a\\µ/.test('aµ'));\n");
    expect(() => execFileSync(process.execPath, [path.join(repositoryRoot, 'scripts/bundle.mjs'), entry], { cwd: repositoryRoot, stdio: 'pipe' })).toThrow(
      /escapes a character that is not ASCII/,
    );
  });
});

describe("the launcher (an app's dist/main.js)", () => {
  let dir: string;
  let entry: string;
  const caches = () => readdirSync(dir).filter((file) => file.endsWith('.v8-cache'));
  const run = (env: Record<string, string> = {}) => execFileSync(process.execPath, [entry], { encoding: 'utf8', env: { ...process.env, ...env } });
  const bundleWith = (line: string) => {
    writeFileSync(entry, ["import { Client } from 'pg';", line, "process.exitCode = Number(process.env.FIXTURE_EXIT ?? 0);"].join('\n'));
    execFileSync(process.execPath, [path.join(repositoryRoot, 'scripts/bundle.mjs'), entry], { cwd: repositoryRoot });
  };

  beforeEach(() => {
    dir = mkdtempSync(path.join(repositoryRoot, 'tools/system-tests/bundle-fixture-'));
    entry = path.join(dir, 'main.js');
    bundleWith("console.log(JSON.stringify({ url: import.meta.url, client: Client.name, here: import.meta.dirname }));");
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it("runs the bundle as the ES module it was, import.meta being the launcher's own", () => {
    expect(JSON.parse(run())).toEqual({ url: pathToFileURL(entry).href, client: 'Client', here: dir });
  });

  it('writes the code cache once a run ends well, and the next run uses it as it is', () => {
    const first = run();
    expect(caches()).toHaveLength(1);
    const cache = path.join(dir, caches()[0]!);
    const written = { bytes: readFileSync(cache), at: statSync(cache).mtimeMs };
    expect(written.bytes.length).toBeGreaterThan(0);
    expect(run()).toBe(first);
    // Taken, not refused and written again.
    expect({ bytes: readFileSync(cache), at: statSync(cache).mtimeMs }).toEqual(written);
  });

  it('writes no cache for a run that fails', () => {
    expect(() => run({ FIXTURE_EXIT: '3' })).toThrow();
    expect(caches()).toEqual([]);
  });

  it('a cache V8 refuses (torn, or of another build of the same length) costs only the compile: the run is right and the cache written again', () => {
    run();
    const cache = path.join(dir, caches()[0]!);
    const garbage = Buffer.alloc(readFileSync(cache).length, 7);
    writeFileSync(cache, garbage);
    expect(JSON.parse(run()).client).toBe('Client');
    expect(readFileSync(cache).equals(garbage)).toBe(false);
  });

  it('a cache that cannot be written (something else at its name) leaves the run right and nothing behind', () => {
    const launcher = readFileSync(entry, 'utf8');
    const name = /const cacheName = '([^']+)';/.exec(launcher)![1]!;
    const blocker = path.join(dir, name);
    mkdirSync(blocker);
    writeFileSync(path.join(blocker, 'keep'), 'x');
    expect(JSON.parse(run()).client).toBe('Client');
    expect(readdirSync(dir).filter((file) => file.startsWith(`${name}.`))).toEqual([]);
  });

  it('keeps the cache in GANTRY_CODE_CACHE_DIR when it is set (an install whose code its user may not write), and takes it from there', () => {
    const cacheDir = mkdtempSync(path.join(dir, 'cache-'));
    const first = run({ GANTRY_CODE_CACHE_DIR: cacheDir });
    expect(caches()).toEqual([]);
    const [name] = readdirSync(cacheDir);
    expect(name).toMatch(/^main\.bundle\.[0-9a-f]{16}\.v8-cache$/);
    const cache = path.join(cacheDir, name!);
    const written = { bytes: readFileSync(cache), at: statSync(cache).mtimeMs };
    expect(run({ GANTRY_CODE_CACHE_DIR: cacheDir })).toBe(first);
    expect({ bytes: readFileSync(cache), at: statSync(cache).mtimeMs }).toEqual(written);
    expect(readdirSync(cacheDir)).toEqual([name]);
  });

  it("a new build has a cache of its own: the earlier build's cache is removed", () => {
    run();
    const [before] = caches();
    bundleWith("console.log(JSON.stringify({ url: import.meta.url, client: Client.name, changed: true }));");
    expect(caches()).toEqual([]);
    expect(JSON.parse(run()).changed).toBe(true);
    expect(caches()).toHaveLength(1);
    expect(caches()[0]).not.toBe(before);
  });

  it('refuses to bundle a launcher (a dist/main.js not compiled again since its last bundle)', () => {
    expect(() => execFileSync(process.execPath, [path.join(repositoryRoot, 'scripts/bundle.mjs'), entry], { cwd: repositoryRoot, stdio: 'pipe' })).toThrow(/already a bundle's launcher/);
  });
});

