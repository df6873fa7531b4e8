// An app's dist/main.js: scripts/bundle.mjs copies this file there, next to the bundle it starts, with
// the two names below filled in (docs/operations.md, "Starting fast").
//
// Compiling the bundle (about 9 MB of JavaScript) was most of the CPU a service spent to start. V8
// can keep what it compiled as a code cache, but Node 20 keeps none between runs for a module (its
// module compile cache came with Node 22), and the packages that do it for CommonJS
// (v8-compile-cache) save only what is compiled while the file loads, not the functions a start
// compiles afterwards (measured: 0.66 against 0.47 CPU-s for the job service refusing a setting, 0.82
// without a cache). So this runs the bundle as a vm.Script with V8's code cache, and writes the cache
// once a run that had none has compiled its start: ten seconds in, or when it ends well.
//
// The cache is named after a hash of the bundle's contents (V8 itself checks only the source's length,
// its own version and its flags), written under a temporary name and renamed, so runs that start
// together never read a torn file; a cache that cannot be read, is refused or cannot be written
// (a read-only install) only costs the compile it would have saved. GANTRY_CODE_CACHE_DIR puts it in a
// directory of its own, for an install whose code its user may not write (the Docker image).
import { isAscii } from 'node:buffer';
import { readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import vm from 'node:vm';

const bundleName = 'main.bundle.cjs';
const cacheName = 'main.bundle.v8-cache';

const here = path.dirname(fileURLToPath(import.meta.url));
const bundle = path.join(here, bundleName);
const cacheFile = path.join(process.env.GANTRY_CODE_CACHE_DIR || here, cacheName);

let cachedData;
try {
  cachedData = readFileSync(cacheFile);
} catch {
  cachedData = undefined;
}

// The bundle file is one function expression, `(function (exports, require, module, __filename,
// __dirname, __bundleImportMeta) {…})`, around CommonJS that was written as ES modules: it reads
// `import.meta` as this file's (the bundle script turns every `import.meta` into the last parameter),
// so URLs it resolves against its own location resolve as they would from dist/main.js. The build
// makes it ASCII but for what a template literal holds; ASCII read as Latin-1 is the same text, and
// V8 takes it as it is, where UTF-8 would be decoded into a copy.
const source = readFileSync(bundle);
const script = new vm.Script(isAscii(source) ? source.toString('latin1') : source.toString('utf8'), {
  filename: bundle,
  cachedData,
  importModuleDynamically: vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER,
});

if (cachedData === undefined || script.cachedDataRejected) {
  let written = false;
  const writeCache = () => {
    if (written) return;
    written = true;
    const partial = `${cacheFile}.${process.pid}`;
    try {
      writeFileSync(partial, script.createCachedData());
      renameSync(partial, cacheFile);
    } catch {
      rmSync(partial, { force: true });
    }
  };
  setTimeout(writeCache, 10_000).unref();
  process.once('exit', (code) => {
    if (code === 0) writeCache();
  });
}

const module = { exports: {} };
script.runInThisContext().call(module.exports, module.exports, createRequire(bundle), module, bundle, here, import.meta);
