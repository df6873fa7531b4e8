import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { serviceSettings } from '@gantry/service-runtime';
import { jobServiceSettings } from '../../../apps/job-service/src/application/job-service-settings.js';
import { prServiceSettings } from '../../../apps/pr-service/src/infrastructure/pr-service-config.js';
import { runnerSettings } from '../../../apps/runner/src/application/runner-config.js';
import { engineSettings } from '../../../apps/workflow-engine/src/application/engine-settings.js';
import { worktreeSettings } from '../../../apps/worktree-service/src/infrastructure/worktree-config.js';

const readme = readFileSync(path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../README.md'), 'utf8');

/** The README's table rows by variable: `| \`NAME\` | default | meaning |`. */
const rows = new Map(
  readme
    .split('\n')
    .map((line) => /^\| `([A-Z_]+)` \| ((?:[^|\\]|\\.)+) \|/.exec(line))
    .filter((match): match is RegExpExecArray => match !== null)
    .map((match) => [match[1], match[2].trim()]),
);

const parts = {
  'every service': serviceSettings({ service: 'docs', schema: 'docs', port: 0, commandsOverHttp: true }),
  'job-service': jobServiceSettings,
  'workflow-engine': engineSettings,
  'worktree-service': worktreeSettings,
  'pr-service': prServiceSettings,
  runner: runnerSettings,
};

describe("the README's settings table", () => {
  it.each(Object.entries(parts))('lists every variable %s reads, with a default', (_, part) => {
    const missing = Object.keys(part.variables).filter((variable) => !rows.get(variable));
    expect(missing).toEqual([]);
  });
});
