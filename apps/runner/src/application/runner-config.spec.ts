import { readFileSync } from 'node:fs';
import { homedir, hostname } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defaultWorktreeRoot, JobKinds } from '@gantry/contracts';
import { SettingsError, settingsOf } from '@gantry/service-runtime';
import { defaultRunnerId, runnerSettings } from './runner-config.js';

const loadRunnerConfig = (env: Record<string, string>) => settingsOf(runnerSettings, env);

describe('runner configuration from the environment', () => {
  it('defaults to every kind, one slot, the claude binary, 60 s renewals and leases that outlive two missed renewals', () => {
    const config = loadRunnerConfig({});
    expect(config).toMatchObject({
      runnerId: defaultRunnerId(hostname(), process.pid),
      kinds: [...JobKinds],
      concurrency: 1,
      agentBin: 'claude',
      leaseRenewMs: 60_000,
      jobLeaseMs: 180_000,
      worktreeLeaseMs: 180_000,
      defaultTargetBranch: 'main',
      // the worktree service's default, outside any checkout: a leased path elsewhere is refused
      worktreeRoot: join(homedir(), '.local', 'state', 'gantry', 'worktrees'),
    });
    expect(config.tokenExpiredPattern.test('OAuth token has expired')).toBe(true);
  });

  it('without GANTRY_WORKTREE_ROOT the worktree root is the one the worktree service uses: $XDG_STATE_HOME/gantry/worktrees, never the current directory', () => {
    expect(loadRunnerConfig({ XDG_STATE_HOME: '/var/state' }).worktreeRoot).toBe('/var/state/gantry/worktrees');
    // a relative XDG_STATE_HOME is ignored, as the XDG specification says
    expect(loadRunnerConfig({ XDG_STATE_HOME: 'state' }).worktreeRoot).toBe(join(homedir(), '.local', 'state', 'gantry', 'worktrees'));
    expect(loadRunnerConfig({ XDG_STATE_HOME: '/var/state' }).worktreeRoot).toBe(defaultWorktreeRoot({ XDG_STATE_HOME: '/var/state' }));
  });

  it('takes the kinds, concurrency, binary, timeouts and token pattern it is given', () => {
    const config = loadRunnerConfig({
      GANTRY_RUNNER_ID: 'runner-a',
      GANTRY_RUNNER_KINDS: 'TASK_IMPLEMENTATION, REVIEW,TASK_IMPLEMENTATION',
      GANTRY_RUNNER_CONCURRENCY: '2',
      GANTRY_AGENT_BIN: '/opt/bin/stand-in-claude',
      GANTRY_AGENT_TIMEOUT_MS: '5000',
      GANTRY_LEASE_RENEW_MS: '1000',
      GANTRY_TOKEN_EXPIRED_PATTERN: 'session (is )?gone',
      GANTRY_WORKTREE_ROOT: '/var/lib/gantry/worktrees',
    });
    expect(config).toMatchObject({
      runnerId: 'runner-a',
      kinds: ['TASK_IMPLEMENTATION', 'REVIEW'],
      concurrency: 2,
      agentBin: '/opt/bin/stand-in-claude',
      agentTimeoutMs: 5000,
      leaseRenewMs: 1000,
      // a job lease is never shorter than the job service accepts
      jobLeaseMs: 10_000,
      worktreeLeaseMs: 3000,
      worktreeRoot: '/var/lib/gantry/worktrees',
    });
    expect(config.tokenExpiredPattern.test('Session is GONE')).toBe(true);
    expect(config.tokenExpiredPattern.test('OAuth token has expired')).toBe(false);
  });

  it.each([
    ['GANTRY_RUNNER_KINDS', 'TASK_IMPLEMENTATION,DEPLOY', /DEPLOY.*not a job kind/],
    ['GANTRY_RUNNER_KINDS', ' , ', /names no job kind/],
    ['GANTRY_RUNNER_CONCURRENCY', '0', /GANTRY_RUNNER_CONCURRENCY must be a whole number from 1 to 64/],
    ['GANTRY_RUNNER_CONCURRENCY', '1.5', /whole number/],
    ['GANTRY_LEASE_RENEW_MS', 'soon', /GANTRY_LEASE_RENEW_MS/],
    ['GANTRY_JOB_LEASE_MS', '1000', /GANTRY_JOB_LEASE_MS must be a whole number from 10000/],
    ['GANTRY_RUNNER_ID', 'runner.host1', /letters, digits/],
    ['GANTRY_TOKEN_EXPIRED_PATTERN', '(unclosed', /not a regular expression/],
  ])('refuses %s=%j with a sentence naming the problem', (name, value, sentence) => {
    expect(() => loadRunnerConfig({ [name]: value })).toThrow(SettingsError);
    expect(() => loadRunnerConfig({ [name]: value })).toThrow(sentence);
  });

  it('makes a runner id of any host name', () => {
    expect(defaultRunnerId('build-host.example.com', 4242)).toBe('build-host-example-com-4242');
    expect(defaultRunnerId('-weird host.name!', 7)).toBe('weird-host-name--7');
    expect(defaultRunnerId('...', 8)).toBe('runner-8');
  });
});

describe('the README\'s runner settings table', () => {
  it('names every setting the runner reads', () => {
    const root = fileURLToPath(new URL('../../../../', import.meta.url));
    const source = readFileSync(join(root, 'apps/runner/src/application/runner-config.ts'), 'utf8');
    const readme = readFileSync(join(root, 'README.md'), 'utf8');
    // the runner's settings: the README's section headed "runner" (### runner / ### Runner settings)
    const section = readme.slice(readme.search(/^### [Rr]unner\b/m));
    const table = section.slice(0, section.indexOf('\n#', 1) === -1 ? undefined : section.indexOf('\n#', 1));
    const settings = [...new Set(source.match(/GANTRY_[A-Z_]+/g))];
    expect(settings.length).toBeGreaterThan(15);
    expect(settings.filter((name) => !table.includes(`| \`${name}\` |`))).toEqual([]);
  });
});

describe("the runner's stop fits in the process's shutdown grace", () => {
  it('GANTRY_RUNNER_SHUTDOWN_GRACE_MS plus the kill grace at or past GANTRY_SHUTDOWN_GRACE_MS is refused, naming it: the process would exit 1 with its agents running', () => {
    expect(() => loadRunnerConfig({ GANTRY_RUNNER_SHUTDOWN_GRACE_MS: '60000' })).toThrow(SettingsError);
    expect(() => loadRunnerConfig({ GANTRY_RUNNER_SHUTDOWN_GRACE_MS: '20000', GANTRY_AGENT_KILL_GRACE_MS: '10000' })).toThrow(
      /GANTRY_RUNNER_SHUTDOWN_GRACE_MS plus GANTRY_AGENT_KILL_GRACE_MS must be less than GANTRY_SHUTDOWN_GRACE_MS/,
    );
  });

  it('fits with the defaults, and once GANTRY_SHUTDOWN_GRACE_MS is raised with it', () => {
    expect(loadRunnerConfig({}).shutdownGraceMs).toBe(15_000);
    expect(loadRunnerConfig({ GANTRY_RUNNER_SHUTDOWN_GRACE_MS: '60000', GANTRY_SHUTDOWN_GRACE_MS: '90000' }).shutdownGraceMs).toBe(60_000);
  });
});
