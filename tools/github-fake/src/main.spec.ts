import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { eventually, startNodeProcess, type ChildService } from '@gantry/testing';
import { GitHubFakeControl } from './index.js';
import { Clone, RetryingOctokit, startWebhookReceiver } from './testing/harness.js';

/* The fake as its own process (what npm start runs): settings from the environment, state kept across a SIGKILL. */

const entry = path.resolve('tools/github-fake/dist/main.js');

async function start(env: Record<string, string>): Promise<{ child: ChildService; url: string }> {
  const child = startNodeProcess(entry, { GANTRY_GITHUB_FAKE_PORT: '0', ...env });
  const url = await eventually(() => /"message":"github fake listening","url":"([^"]+)"/.exec(child.output())?.[1], { what: 'the fake to listen', timeoutMs: 30_000 });
  return { child, url };
}

it('serves an existing bare repository with settings and automatic checks from the environment, sends signed webhooks, keeps its PRs across a SIGKILL and stops on SIGTERM', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'github-fake-process-'));
  const receiver = await startWebhookReceiver('process-secret');
  const origin = path.join(dir, 'origin.git');
  const seed = path.join(dir, 'seed');
  execFileSync('git', ['init', '-q', '--initial-branch=main', seed]);
  execFileSync('git', ['-C', seed, '-c', 'user.name=t', '-c', 'user.email=t@example.com', 'commit', '-q', '--allow-empty', '-m', 'first']);
  execFileSync('git', ['clone', '-q', '--bare', seed, origin]);
  const env = {
    GANTRY_GITHUB_FAKE_DATA_DIR: path.join(dir, 'data'),
    GANTRY_GITHUB_FAKE_REPOSITORIES: `gantry/demo=${origin}`,
    GANTRY_GITHUB_FAKE_WEBHOOK_URL: receiver.url,
    GANTRY_GITHUB_FAKE_WEBHOOK_SECRET: 'process-secret',
    GANTRY_GITHUB_FAKE_TOKENS: 'process-token',
    GANTRY_GITHUB_FAKE_REPOSITORY_SETTINGS: JSON.stringify({ allowAutoMerge: true, requiredChecks: ['ci'] }),
    GANTRY_GITHUB_FAKE_AUTO_CHECKS: 'ci',
    GANTRY_GITHUB_FAKE_AUTO_CHECK_MS: '10',
  };
  let first: ChildService | undefined;
  let second: ChildService | undefined;
  const clone = new Clone(origin);
  try {
    const started = await start(env);
    first = started.child;
    const sha = clone.commitAndPush('gantry/demo-1', { 'hello.txt': 'hello\n' }, 'Hello');
    const control = new GitHubFakeControl(started.url);
    await control.refresh();
    const octokit = new RetryingOctokit({ auth: 'process-token', baseUrl: started.url, throttle: { enabled: false }, retry: { enabled: false } });
    const { data: pr } = await octokit.rest.pulls.create({ owner: 'gantry', repo: 'demo', head: 'gantry/demo-1', base: 'main', title: 'Hello' });
    const [opened] = await receiver.waitFor((d) => d.event === 'pull_request' && d.body.action === 'opened');
    expect(opened!.signatureValid).toBe(true);
    expect(opened!.body.pull_request.head.sha).toBe(sha);
    const [ci] = await receiver.waitFor((d) => d.event === 'check_run' && d.body.action === 'completed');
    expect(ci!.body.check_run).toMatchObject({ name: 'ci', head_sha: sha, conclusion: 'success' });
    const { data: repository } = await octokit.rest.repos.get({ owner: 'gantry', repo: 'demo' });
    expect(repository.allow_auto_merge).toBe(true);
    expect((await control.repository('gantry/demo')).protection.requiredChecks).toEqual(['ci']);

    expect(await first.kill('SIGKILL')).toBeNull();
    const restarted = await start(env);
    second = restarted.child;
    const again = new RetryingOctokit({ auth: 'process-token', baseUrl: restarted.url, throttle: { enabled: false }, retry: { enabled: false } });
    const { data } = await again.rest.pulls.get({ owner: 'gantry', repo: 'demo', pull_number: pr.number });
    expect(data).toMatchObject({ state: 'open', head: { sha } });
    expect(data.base.repo.clone_url).toBe(`file://${origin}`);
    expect(await second.kill('SIGTERM')).toBe(0);
  } finally {
    await first?.kill('SIGKILL');
    await second?.kill('SIGKILL');
    clone.remove();
    await receiver.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
