#!/usr/bin/env node
// Bundles a compiled entry point (an app's dist/main.js, as swc wrote it) into one file with esbuild:
// the app's own modules, the workspace libraries and its npm packages go into dist/main.bundle.cjs,
// and dist/main.js becomes the small launcher that runs it with V8's code cache
// (scripts/bundle-launcher.mjs).
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
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import path from 'node:path';
import { parse } from 'acorn';
import * as walk from 'acorn-walk';
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

const input = path.resolve(entry);
if (readFileSync(input, 'utf8').includes('scripts/bundle.mjs copies this file there')) {
  throw new Error(`${entry} is already a bundle's launcher: compile it again (swc) before bundling it`);
}
const base = path.basename(input, '.js');
const bundleFile = path.join(path.dirname(input), `${base}.bundle.cjs`);
/** The function around the bundle's code: the parameters the launcher passes it (scripts/bundle-launcher.mjs). */
const BUNDLE_WRAPPER_OPEN = '(function (exports, require, module, __filename, __dirname, __bundleImportMeta) {';
const BUNDLE_WRAPPER_CLOSE = '\n})';
/*
 * CommonJS, so that the launcher can run it as one vm.Script with a code cache (Node 20 has none for
 * ES modules). What an ES module would have differently is kept: the whole bundle is strict code, as
 * every part of the ES module bundle was (esbuild starts it with "use strict", its entry being an ES
 * module: checked below); `import.meta` is the launcher's, which sits where the ES
 * module bundle did (the launcher passes it as `__bundleImportMeta`). Top-level await is what
 * CommonJS cannot do: an entry point that awaits at its top fails the build here.
 */
const result = await build({
  entryPoints: [input],
  bundle: true,
  platform: 'node',
  format: 'cjs',
  target: 'node20',
  keepNames: true,
  write: false,
  outfile: bundleFile,
  logLevel: 'warning',
  plugins: [notInstalledStaysExternal],
  define: { 'import.meta': '__bundleImportMeta' },
  metafile: true,
});
const [output] = result.outputFiles;
if (!output || result.outputFiles.length !== 1) throw new Error(`esbuild wrote ${result.outputFiles.length} files for ${entry}, expected one`);
const { code, nonAsciiLeft } = rewrite(output.text);
if (!code.startsWith('"use strict";')) throw new Error(`esbuild's bundle of ${entry} is not strict code: see scripts/bundle.mjs`);
/*
 * The file holds the function the launcher calls, not a module: the launcher compiles the file's text
 * as it is. Wrapped there at every start, the 9 MB source was copied once more into a new string before
 * V8 compiled it; read as it is (Latin-1, which for ASCII is the same text), V8 takes the file's bytes
 * with no decoding and no copy into its heap. That was 165 against 87 ms of CPU to read the job
 * service's bundle and compile it from its code cache (pairs of runs). The wrapper is on the first
 * line, so line numbers in stack traces stay those of esbuild's output.
 */
const wrapped = `${BUNDLE_WRAPPER_OPEN}${code}${BUNDLE_WRAPPER_CLOSE}`;
writeFileSync(bundleFile, wrapped);

// The launcher, named after this bundle and a hash of it (its code cache is valid for these bytes only);
// the caches of earlier builds go.
const hash = createHash('sha256').update(wrapped).digest('hex').slice(0, 16);
const cacheName = `${base}.bundle.${hash}.v8-cache`;
for (const file of readdirSync(path.dirname(input))) {
  if (file.startsWith(`${base}.bundle.`) && file.includes('.v8-cache') && file !== cacheName) rmSync(path.join(path.dirname(input), file), { force: true });
}
const launcherTemplate = readFileSync(new URL('./bundle-launcher.mjs', import.meta.url), 'utf8');
const launcher = launcherTemplate
  .replace("const bundleName = 'main.bundle.cjs';", `const bundleName = '${path.basename(bundleFile)}';`)
  .replace("const cacheName = 'main.bundle.v8-cache';", `const cacheName = '${cacheName}';`);
if (!launcher.includes(`'${cacheName}'`) || !launcher.includes(`'${path.basename(bundleFile)}'`)) {
  throw new Error('scripts/bundle-launcher.mjs no longer names its bundle and cache as scripts/bundle.mjs expects');
}
writeFileSync(input, launcher);
/**
 * Two rewrites of esbuild's output, made in one parse of it:
 *
 * keepNames makes esbuild wrap every named function and class in its `__name(fn, "name")` where it
 * is created, so that one renamed to avoid a clash in the bundle (two modules' `Client`) keeps its
 * name: class names are read (NestJS, TypeORM, error names) and function names show in stack
 * traces. But a closure made per call (most of a command's handling) then costs an
 * Object.defineProperty each time: the job service took about 7% more CPU per job bundled than
 * unbundled. So, keeping every name as it would be unbundled:
 * - a function expression whose name JavaScript gives it anyway, the same as esbuild's
 *   (`const claimOne = () => …`, `claimOne = () => …`, `{ reply: () => … }`, a class field), is
 *   unwrapped;
 * - `__name` itself leaves alone a function or class that already has the name (a nested
 *   `function f() {}` that was not renamed), and renames only one that was.
 * esbuild is pinned; a helper of another shape fails the build here.
 *
 * And the bundle is made ASCII. esbuild escapes what is not ASCII in strings and names, but keeps
 * it in the comments it carries over and in regular expressions (a dash in a comment, `µs` in a
 * pattern). One such character makes the whole 9 MB source a two-byte string in V8: read, decoded
 * and compiled from its code cache, that cost the job service about 90 ms more CPU at every start
 * (190 + 100 ms against 145 + 63, measured in pairs of runs). In a comment the character is written
 * as its `\uXXXX` text; in a regular expression as the `\uXXXX` escape, which matches the same
 * character with or without the `u` flag. What is left (a template literal, whose raw text an
 * escape would change) stays as it is, and the build line says how much.
 */
function rewrite(code) {
  const helper = 'var __name = (target, value) => __defProp(target, "name", { value, configurable: true });';
  if (!code.includes(helper) && code.includes('__name(')) throw new Error(`esbuild's __name helper is not the one scripts/bundle.mjs knows: see rewrite`);
  const edits = []; // [start, end, replacement]: [start, end) becomes replacement
  const unwrap = (call, name) => {
    if (call?.type !== 'CallExpression' || call.callee.type !== 'Identifier' || call.callee.name !== '__name') return;
    const [fn, label] = call.arguments;
    const anonymous = fn && (fn.type === 'ArrowFunctionExpression' || (fn.type === 'FunctionExpression' && !fn.id));
    if (!anonymous || label?.type !== 'Literal' || label.value !== name) return;
    edits.push([call.start, fn.start, ''], [fn.end, call.end, '']); // `__name(` and `, "name")`
  };
  const escapable = []; // [start, end, kind] of the comments and regular expressions, in order
  const ast = parse(code, {
    ecmaVersion: 'latest',
    sourceType: 'script',
    allowReturnOutsideFunction: true,
    onComment: (_block, _text, start, end) => escapable.push([start, end, 'comment']),
    onToken: (token) => token.type.label === 'regexp' && escapable.push([token.start, token.end, 'regexp']),
  });
  walk.simple(ast, {
    VariableDeclarator: (node) => node.id.type === 'Identifier' && unwrap(node.init, node.id.name),
    AssignmentExpression: (node) => node.operator === '=' && node.left.type === 'Identifier' && unwrap(node.right, node.left.name),
    Property: (node) => !node.computed && node.key.type === 'Identifier' && !node.method && unwrap(node.value, node.key.name),
    PropertyDefinition: (node) => !node.computed && node.key.type === 'Identifier' && unwrap(node.value, node.key.name),
  });
  escapable.sort((a, b) => a[0] - b[0]);
  let nonAsciiLeft = 0;
  let range = 0;
  for (const match of code.matchAll(/[^\x00-\x7f]/g)) {
    const at = match.index;
    while (range < escapable.length && escapable[range][1] <= at) range++;
    const [start, , kind] = escapable[range] ?? [];
    if (start === undefined || start > at) {
      nonAsciiLeft++;
      continue;
    }
    if (kind === 'regexp' && /(^|[^\\])(\\\\)*\\$/.test(code.slice(Math.max(start, at - 16), at))) {
      throw new Error(`a regular expression escapes a character that is not ASCII (at ${at}): see rewrite in scripts/bundle.mjs`);
    }
    edits.push([at, at + 1, `\\u${match[0].charCodeAt(0).toString(16).padStart(4, '0')}`]);
  }
  let out = '';
  let at = 0;
  for (const [start, end, replacement] of edits.sort((a, b) => a[0] - b[0])) {
    out += code.slice(at, start) + replacement;
    at = end;
  }
  out += code.slice(at);
  return {
    code: out.replace(helper, 'var __name = (target, value) => target.name === value ? target : __defProp(target, "name", { value, configurable: true });'),
    nonAsciiLeft,
  };
}

const modules = Object.keys(result.metafile.inputs).length;
const external = [...new Set(Object.values(result.metafile.outputs).flatMap((o) => o.imports.filter((i) => i.external && i.kind !== 'require-resolve' && !i.path.startsWith('node:') && !builtinModules.includes(i.path)).map((i) => i.path)))];
console.log(`bundled ${entry}: ${modules} modules, ${(output.contents.length / 1e6).toFixed(1)} MB${nonAsciiLeft ? `, not ASCII: ${nonAsciiLeft} characters in template literals (a start compiles it as a two-byte string)` : ''}${external.length ? `; left to run time: ${external.sort().join(', ')}` : ''}`);
