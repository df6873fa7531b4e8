#!/usr/bin/env node
// Regenerates contract/rest-openapi.subset.json and contract/webhooks-openapi.subset.json: the part of
// GitHub's published OpenAPI descriptions (@octokit/openapi, @octokit/openapi-webhooks) that the fake
// serves, with every component those parts reference. The whole packages are hundreds of megabytes
// unpacked; the contract tests need only these schemas, so they are vendored and this script is how
// they are brought up to date:
//
//   node tools/github-fake/scripts/vendor-openapi.mjs [restVersion] [webhooksVersion]
//
// It runs `npm pack` (the ordinary npm client) into a temporary directory, reads the one
// api.github.com JSON file of each tarball, and writes the subsets with the package versions in
// `info.x-vendored-from`. Add an operation or webhook below when the fake starts serving it.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const REST_VERSION = process.argv[2] ?? '23.0.2';
const WEBHOOKS_VERSION = process.argv[3] ?? '12.1.0';

/** REST operations the fake serves (operationId → path and method are read from the description). */
const REST_OPERATIONS = [
  'repos/get',
  'pulls/create',
  'pulls/get',
  'pulls/list',
  'pulls/update',
  'pulls/merge',
  'checks/create',
  'checks/get',
  'checks/update',
  'checks/list-for-ref',
  'repos/get-combined-status-for-ref',
  'repos/create-commit-status',
];

/** Webhook events (event-action) the fake delivers. */
const WEBHOOKS = [
  'pull-request-opened',
  'pull-request-reopened',
  'pull-request-edited',
  'pull-request-synchronize',
  'pull-request-ready-for-review',
  'pull-request-converted-to-draft',
  'pull-request-closed',
  'pull-request-auto-merge-enabled',
  'pull-request-auto-merge-disabled',
  'check-run-created',
  'check-run-completed',
  'check-suite-completed',
  'status',
  'push',
  'pull-request-review-submitted',
];

const here = path.dirname(fileURLToPath(import.meta.url));
const outDir = path.join(here, '..', 'contract');

function readFromTarball(pkg, version, file) {
  const dir = mkdtempSync(path.join(tmpdir(), 'github-fake-openapi-'));
  try {
    const tarball = execFileSync('npm', ['pack', '--silent', `${pkg}@${version}`], { cwd: dir, encoding: 'utf8' }).trim().split('\n').pop();
    execFileSync('tar', ['-xzf', tarball, `package/${file}`], { cwd: dir });
    return JSON.parse(readFileSync(path.join(dir, 'package', file), 'utf8'));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Every `#/...` pointer reachable from `roots`, followed through the document. */
function collectRefs(doc, roots) {
  const seen = new Set();
  const queue = [...roots];
  const visit = (node) => {
    if (Array.isArray(node)) return node.forEach(visit);
    if (!node || typeof node !== 'object') return;
    for (const [key, value] of Object.entries(node)) {
      if (key === '$ref' && typeof value === 'string' && value.startsWith('#/') && !seen.has(value)) {
        seen.add(value);
        queue.push(resolve(doc, value));
      } else visit(value);
    }
  };
  while (queue.length) visit(queue.shift());
  return seen;
}

function resolve(doc, pointer) {
  return pointer
    .slice(2)
    .split('/')
    .map((part) => part.replace(/~1/g, '/').replace(/~0/g, '~'))
    .reduce((node, part) => node?.[part], doc);
}

function setPointer(target, pointer, value) {
  const parts = pointer.slice(2).split('/').map((part) => part.replace(/~1/g, '/').replace(/~0/g, '~'));
  let node = target;
  for (const part of parts.slice(0, -1)) node = node[part] ??= {};
  node[parts.at(-1)] = value;
}

function vendorRest() {
  const doc = readFromTarball('@octokit/openapi', REST_VERSION, 'generated/api.github.com.json');
  const paths = {};
  for (const operationId of REST_OPERATIONS) {
    const found = Object.entries(doc.paths).flatMap(([p, ops]) =>
      Object.entries(ops)
        .filter(([, op]) => op && typeof op === 'object' && op.operationId === operationId)
        .map(([method, op]) => ({ p, method, op })),
    );
    if (found.length !== 1) throw new Error(`operation ${operationId} found ${found.length} times`);
    const { p, method, op } = found[0];
    paths[p] = { ...(paths[p] ?? {}), [method]: op };
  }
  const subset = {
    openapi: doc.openapi,
    info: { ...doc.info, 'x-vendored-from': `@octokit/openapi@${REST_VERSION} generated/api.github.com.json` },
    paths,
    components: {},
  };
  for (const ref of collectRefs(doc, [paths])) setPointer(subset, ref, resolve(doc, ref));
  return subset;
}

function vendorWebhooks() {
  const doc = readFromTarball('@octokit/openapi-webhooks', WEBHOOKS_VERSION, 'generated/api.github.com.json');
  const webhooks = {};
  for (const name of WEBHOOKS) {
    if (!doc.webhooks[name]) throw new Error(`webhook ${name} is not in the description`);
    webhooks[name] = doc.webhooks[name];
  }
  const subset = {
    openapi: doc.openapi,
    info: { ...doc.info, 'x-vendored-from': `@octokit/openapi-webhooks@${WEBHOOKS_VERSION} generated/api.github.com.json` },
    webhooks,
    components: {},
  };
  for (const ref of collectRefs(doc, [webhooks])) setPointer(subset, ref, resolve(doc, ref));
  return subset;
}

writeFileSync(path.join(outDir, 'rest-openapi.subset.json'), JSON.stringify(vendorRest(), null, 1) + '\n');
writeFileSync(path.join(outDir, 'webhooks-openapi.subset.json'), JSON.stringify(vendorWebhooks(), null, 1) + '\n');
console.log(`wrote ${outDir}/rest-openapi.subset.json (@octokit/openapi@${REST_VERSION}) and webhooks-openapi.subset.json (@octokit/openapi-webhooks@${WEBHOOKS_VERSION})`);
