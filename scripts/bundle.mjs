#!/usr/bin/env node
// Bundles a compiled entry point (an app's dist/main.js, as swc wrote it) into one ES module, in
// place, with esbuild: the app's own modules, the workspace libraries and its npm packages.
//
//   node scripts/bundle.mjs apps/job-service/dist/main.js     (each app's build runs it after swc)
//
// Why: NestJS 12 and most of its packages are ES modules of many small files, and Node 20 spends
// most of a service's start resolving, reading and compiling them one by one (about 1.8 of the
// 2 s the job service took to answer /ready). One file starts in about half the time; see
// docs/operations.md, "Starting fast". The bundle keeps every name (no minifying), so logs and
// stack traces read as before, and the modules swc wrote stay beside it for whoever imports them.
//
// Packages that are not installed (NestJS's optional transports and validators, loaded only when
// configured) stay plain imports: they fail at run time exactly as they would unbundled.
import { writeFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import path from 'node:path';
import { build } from 'esbuild';

const entry = process.argv[2];
if (!entry) {
  console.error('usage: node scripts/bundle.mjs <compiled entry point, e.g. apps/job-service/dist/main.js>');
  process.exit(2);
}

/** Leaves a bare import that does not resolve (a package that is not installed) to run time. */
const notInstalledStaysExternal = {
  name: 'not-installed-stays-external',
  setup(plugin) {
    plugin.onResolve({ filter: /^[^./]/ }, async (args) => {
      if (args.pluginData?.probing) return undefined;
      const found = await plugin.resolve(args.path, {
        kind: args.kind,
        importer: args.importer,
        resolveDir: args.resolveDir,
        pluginData: { probing: true },
      });
      if (found.errors.length === 0) return { path: found.path, external: found.external, namespace: found.namespace, sideEffects: found.sideEffects };
      return { path: args.path, external: true };
    });
  },
};

// esbuild reads the whole input before it writes, but refuses to overwrite it: write the result here.
const input = path.resolve(entry);
const result = await build({
  entryPoints: [input],
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  keepNames: true,
  write: false,
  outfile: input,
  logLevel: 'warning',
  plugins: [notInstalledStaysExternal],
  // CommonJS packages inside an ES module bundle call require(): give them Node's.
  banner: { js: "import { createRequire as __bundleCreateRequire } from 'node:module'; const require = __bundleCreateRequire(import.meta.url);" },
  metafile: true,
});
const [output] = result.outputFiles;
if (!output || result.outputFiles.length !== 1) throw new Error(`esbuild wrote ${result.outputFiles.length} files for ${entry}, expected one`);
writeFileSync(input, output.contents);
const modules = Object.keys(result.metafile.inputs).length;
const external = [...new Set(Object.values(result.metafile.outputs).flatMap((o) => o.imports.filter((i) => i.external && !i.path.startsWith('node:') && !builtinModules.includes(i.path)).map((i) => i.path)))];
console.log(`bundled ${entry}: ${modules} modules, ${(output.contents.length / 1e6).toFixed(1)} MB${external.length ? `; left to run time: ${external.sort().join(', ')}` : ''}`);
