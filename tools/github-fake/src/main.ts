import path from 'node:path';
import { startGitHubFake } from './index.js';
import type { CreateRepositoryInput, RepositoryUpdate } from './fake-github.js';

/*
 * The fake as a process (npm start runs it when no GitHub token is configured). Settings come from
 * the environment (see the README); it logs JSON lines and stops on SIGTERM / SIGINT.
 */

function log(message: string, fields: Record<string, unknown> = {}): void {
  process.stdout.write(`${JSON.stringify({ time: new Date().toISOString(), level: 'info', component: 'github-fake', message, ...fields })}\n`);
}

function list(value: string | undefined): string[] {
  return (value ?? '')
    .split(',')
    .map((item) => item.trim())
    .filter(Boolean);
}

/** `owner/name[=/path/to/existing.git]` entries, each with the settings of GANTRY_GITHUB_FAKE_REPOSITORY_SETTINGS. */
function repositoriesFrom(value: string | undefined, settingsJson: string | undefined): CreateRepositoryInput[] {
  const { requiredChecks, strict, ...settings } = settingsJson ? (JSON.parse(settingsJson) as RepositoryUpdate) : ({} as RepositoryUpdate);
  return list(value).map((item) => {
    const [fullName, gitDir] = item.split('=');
    const [owner, name] = (fullName ?? '').split('/');
    if (!owner || !name) throw new Error(`GANTRY_GITHUB_FAKE_REPOSITORIES: "${item}" is not owner/name or owner/name=/path/to/repo.git`);
    return { owner, name, ...(gitDir ? { gitDir: path.resolve(gitDir) } : {}), settings, requiredChecks, strict };
  });
}

const env = process.env;
const secret = env.GANTRY_GITHUB_FAKE_WEBHOOK_SECRET;
const fake = await startGitHubFake({
  port: Number(env.GANTRY_GITHUB_FAKE_PORT ?? 3110),
  host: env.GANTRY_GITHUB_FAKE_HOST ?? '127.0.0.1',
  dataDir: path.resolve(env.GANTRY_GITHUB_FAKE_DATA_DIR ?? path.join(process.cwd(), '.gantry', 'github-fake')),
  webhooks: list(env.GANTRY_GITHUB_FAKE_WEBHOOK_URL).map((url) => ({ url, secret })),
  tokens: env.GANTRY_GITHUB_FAKE_TOKENS ? list(env.GANTRY_GITHUB_FAKE_TOKENS) : undefined,
  mergeabilityDelayMs: Number(env.GANTRY_GITHUB_FAKE_MERGEABILITY_DELAY_MS ?? 200),
  refPollMs: Number(env.GANTRY_GITHUB_FAKE_REF_POLL_MS ?? 200),
  repositories: repositoriesFrom(env.GANTRY_GITHUB_FAKE_REPOSITORIES, env.GANTRY_GITHUB_FAKE_REPOSITORY_SETTINGS),
  autoChecks: list(env.GANTRY_GITHUB_FAKE_AUTO_CHECKS).map((name) => ({ name, delayMs: Number(env.GANTRY_GITHUB_FAKE_AUTO_CHECK_MS ?? 1000) })),
  log,
});

let stopping = false;
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.on(signal, () => {
    if (stopping) return;
    stopping = true;
    log('stopping', { signal });
    fake.close().then(
      () => process.exit(0),
      (error: unknown) => {
        log('did not stop cleanly', { error: String(error) });
        process.exit(1);
      },
    );
  });
}
