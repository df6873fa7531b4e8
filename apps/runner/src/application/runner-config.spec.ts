import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { homedir, hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defaultWorktreeRoot, JobKinds, JobLeaseDurationMsSchema, LeaseDurationMsSchema } from '@gantry/contracts';
import { SettingsError, settingsOf } from '@gantry/service-runtime';
import { defaultRunnerId, runnerSettings } from './runner-config.js';
import { AGENT_AFTER_KILL_MS } from '../infrastructure/agent/agent-process.js';

const loadRunnerConfig = (env: Record<string, string>) => settingsOf(runnerSettings, env);
const startDir = process.cwd();

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
      GANTRY_RUNNER_COMMAND_TIMEOUT_MS: '500',
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
      commandTimeoutMs: 500,
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
    ['GANTRY_TOKEN_EXPIRED_PATTERN', 'expired|', /matches the empty string/],
    ['GANTRY_TOKEN_EXPIRED_PATTERN', '.*', /matches the empty string/],
  ])('refuses %s=%j with a sentence naming the problem', (name, value, sentence) => {
    expect(() => loadRunnerConfig({ [name]: value })).toThrow(SettingsError);
    expect(() => loadRunnerConfig({ [name]: value })).toThrow(sentence);
  });

  it('resolves a relative GANTRY_AGENT_BIN against the directory the runner starts in: the agent starts in its worktree, where the path would name a file of the repository', () => {
    expect(loadRunnerConfig({ GANTRY_AGENT_BIN: 'apps/runner/bin/stand-in-claude' }).agentBin).toBe(join(process.cwd(), 'apps/runner/bin/stand-in-claude'));
    expect(loadRunnerConfig({ GANTRY_AGENT_BIN: './claude' }).agentBin).toBe(join(process.cwd(), 'claude'));
    // a bare name is looked up on PATH, as before
    expect(loadRunnerConfig({ GANTRY_AGENT_BIN: 'claude' }).agentBin).toBe('claude');
  });

  it('resolves a relative GANTRY_RUNNER_SCRATCH_DIR against the directory the runner starts in: the agent, started in its worktree, is handed its payload and MCP config by absolute path', () => {
    expect(loadRunnerConfig({ GANTRY_RUNNER_SCRATCH_DIR: 'scratch/runner-a' }).scratchDir).toBe(join(process.cwd(), 'scratch/runner-a'));
    expect(loadRunnerConfig({ GANTRY_RUNNER_SCRATCH_DIR: '/var/lib/gantry/runner-a' }).scratchDir).toBe('/var/lib/gantry/runner-a');
  });

  it('resolves a bare GANTRY_AGENT_BIN on PATH at start, on its absolute entries only: a relative entry would be taken from the worktree', () => {
    const root = mkdtempSync(join(tmpdir(), 'gantry-agent-bin-'));
    try {
      const [notExecutable, installed, here] = ['not-executable', 'installed', 'here'].map((dir) => join(root, dir));
      for (const dir of [notExecutable, installed, here]) mkdirSync(dir);
      writeFileSync(join(notExecutable, 'claude'), '', { mode: 0o644 });
      writeFileSync(join(installed, 'claude'), '#!/bin/sh\n', { mode: 0o755 });
      writeFileSync(join(here, 'claude'), '#!/bin/sh\n', { mode: 0o755 });
      process.chdir(here);
      try {
        // '.', an empty entry and a relative one come first: none of them is what the runner starts
        const config = loadRunnerConfig({ PATH: ['.', '', 'bin', notExecutable, installed].join(':') });
        expect(config.agentBin).toBe(join(installed, 'claude'));
        // found on no absolute entry, the name stays a name (the first job then fails to start it, the runner's failure)
        expect(loadRunnerConfig({ PATH: '.:' }).agentBin).toBe('claude');
        expect(loadRunnerConfig({ PATH: `.:${installed}`, GANTRY_AGENT_BIN: 'no-such-agent' }).agentBin).toBe('no-such-agent');
      } finally {
        process.chdir(startDir);
      }
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
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
      /GANTRY_SHUTDOWN_GRACE_MS \(30000 ms\) is shorter than the stop it bounds: GANTRY_RUNNER_SHUTDOWN_GRACE_MS \+ GANTRY_AGENT_KILL_GRACE_MS/,
    );
  });

  it('graces that leave no time for the hand-backs and for closing NATS and HTTP are refused, with every part and their sum named', () => {
    // 20 s + 9 s is below the 30 s limit, but the hand-back and the closing of the connections have to fit in it too.
    const tight = { GANTRY_RUNNER_SHUTDOWN_GRACE_MS: '20000', GANTRY_AGENT_KILL_GRACE_MS: '9000', GANTRY_SHUTDOWN_GRACE_MS: '30000' };
    expect(() => loadRunnerConfig(tight)).toThrow(SettingsError);
    expect(() => loadRunnerConfig(tight)).toThrow(
      'GANTRY_SHUTDOWN_GRACE_MS (30000 ms) is shorter than the stop it bounds: GANTRY_RUNNER_SHUTDOWN_GRACE_MS + GANTRY_AGENT_KILL_GRACE_MS + 2000 ms after the SIGKILL for the agents\' output and process groups + 1000 ms for the hand-backs and releases + 2000 ms for closing NATS and HTTP (20000 + 9000 + 2000 + 1000 + 2000 = 34000 ms)',
    );
    // With the limit raised by what was missing, it fits.
    expect(loadRunnerConfig({ ...tight, GANTRY_SHUTDOWN_GRACE_MS: '34000' }).stopLimitMs).toBe(34_000);
  });

  it('counts what a run waits after its agent\'s SIGKILL: settings that fit only without it are refused', () => {
    // 15 s + 10 s + 1 s + 2 s = 28 s fits in 29 s; the run's waits after the SIGKILL (for the output, then the group) do not.
    const fitsOnlyWithoutIt = { GANTRY_RUNNER_SHUTDOWN_GRACE_MS: '15000', GANTRY_AGENT_KILL_GRACE_MS: '10000', GANTRY_SHUTDOWN_GRACE_MS: '29000' };
    expect(() => loadRunnerConfig(fitsOnlyWithoutIt)).toThrow(
      `GANTRY_SHUTDOWN_GRACE_MS (29000 ms) is shorter than the stop it bounds: GANTRY_RUNNER_SHUTDOWN_GRACE_MS + GANTRY_AGENT_KILL_GRACE_MS + ${2 * AGENT_AFTER_KILL_MS} ms after the SIGKILL`,
    );
    expect(() => loadRunnerConfig(fitsOnlyWithoutIt)).toThrow(`(15000 + 10000 + ${2 * AGENT_AFTER_KILL_MS} + 1000 + 2000 = 30000 ms)`);
    expect(loadRunnerConfig({ ...fitsOnlyWithoutIt, GANTRY_SHUTDOWN_GRACE_MS: '30000' }).stopLimitMs).toBe(30_000);
  });

  it('fits with the defaults, and once GANTRY_SHUTDOWN_GRACE_MS is raised with it', () => {
    expect(loadRunnerConfig({}).shutdownGraceMs).toBe(15_000);
    expect(loadRunnerConfig({ GANTRY_RUNNER_SHUTDOWN_GRACE_MS: '60000', GANTRY_SHUTDOWN_GRACE_MS: '90000' }).shutdownGraceMs).toBe(60_000);
  });
});

describe('the repository and target branch of a job that names none', () => {
  it.each([
    ['GANTRY_TARGET_BRANCH', '--upload-pack=touch pwned', /GANTRY_TARGET_BRANCH is not a branch name: branch name must not start with "-"/],
    ['GANTRY_TARGET_BRANCH', 'main..dev', /GANTRY_TARGET_BRANCH is not a branch name/],
    ['GANTRY_TARGET_BRANCH', 'HEAD', /GANTRY_TARGET_BRANCH is not a branch name/],
    ['GANTRY_REPOSITORY_URL', '--upload-pack=touch pwned', /GANTRY_REPOSITORY_URL .*must not start with "-"/],
    ['GANTRY_REPOSITORY_URL', 'ext::sh -c touch% pwned', /GANTRY_REPOSITORY_URL .*transport helper|whitespace/],
    ['GANTRY_REPOSITORY_URL', 'repos/app.git', /GANTRY_REPOSITORY_URL .*absolute local path/],
    ['GANTRY_REPOSITORY_URL', '/srv/git/../../etc', /GANTRY_REPOSITORY_URL .*"\.\." segments/],
    ['GANTRY_REPOSITORY_URL', 'http://git.example.com/app.git', /GANTRY_REPOSITORY_URL .*scheme "http" is not allowed/],
  ])('refuses %s=%j at start, naming it', (name, value, sentence) => {
    expect(() => loadRunnerConfig({ [name]: value })).toThrow(SettingsError);
    expect(() => loadRunnerConfig({ [name]: value })).toThrow(sentence);
  });

  it('refuses an https GANTRY_REPOSITORY_URL with credentials without quoting them: it would go into the lease command and the run record', () => {
    const load = () => loadRunnerConfig({ GANTRY_REPOSITORY_URL: 'https://bot:ghp_runnerConfigSpecToken0001@git.example.com/app.git' });
    expect(load).toThrow(/GANTRY_REPOSITORY_URL .*must not carry credentials/);
    expect(() => load()).not.toThrow(/ghp_runnerConfigSpecToken0001/);
  });

  it('takes the URLs and branch names jobs may name', () => {
    for (const url of ['https://git.example.com/team/app.git', 'ssh://git@git.example.com/app.git', 'git@git.example.com:team/app.git', 'file:///srv/git/app.git', '/srv/git/app.git']) {
      expect(loadRunnerConfig({ GANTRY_REPOSITORY_URL: url }).defaultRepositoryUrl).toBe(url);
    }
    expect(loadRunnerConfig({ GANTRY_TARGET_BRANCH: 'release/2026-12' }).defaultTargetBranch).toBe('release/2026-12');
    expect(loadRunnerConfig({}).defaultRepositoryUrl).toBeNull();
  });
});

describe('a backoff that grows', () => {
  it('an initial pause longer than GANTRY_RUNNER_BACKOFF_MAX_MS is refused, naming both: every pause would be the cap from the first failure', () => {
    expect(() => loadRunnerConfig({ GANTRY_RUNNER_BACKOFF_INITIAL_MS: '5000', GANTRY_RUNNER_BACKOFF_MAX_MS: '1000' })).toThrow(SettingsError);
    expect(() => loadRunnerConfig({ GANTRY_RUNNER_BACKOFF_INITIAL_MS: '5000', GANTRY_RUNNER_BACKOFF_MAX_MS: '1000' })).toThrow(
      /GANTRY_RUNNER_BACKOFF_INITIAL_MS .*must not be longer than GANTRY_RUNNER_BACKOFF_MAX_MS/,
    );
    // the default cap (30 s) is below the largest initial pause (60 s) a runner may be given
    expect(() => loadRunnerConfig({ GANTRY_RUNNER_BACKOFF_INITIAL_MS: '60000' })).toThrow(/GANTRY_RUNNER_BACKOFF_MAX_MS/);
  });

  it('an initial pause up to the cap is taken', () => {
    expect(loadRunnerConfig({ GANTRY_RUNNER_BACKOFF_INITIAL_MS: '1000', GANTRY_RUNNER_BACKOFF_MAX_MS: '1000' })).toMatchObject({ backoffInitialMs: 1000, backoffMaxMs: 1000 });
  });
});

describe('leases the renewals can keep', () => {
  it('a job or worktree lease no longer than the renewal interval is refused, naming it: it would run out before the renewal that keeps it', () => {
    expect(() => loadRunnerConfig({ GANTRY_JOB_LEASE_MS: '30000' })).toThrow(/GANTRY_JOB_LEASE_MS \(30000 ms\) must be at least GANTRY_LEASE_RENEW_MS \+ 2 × GANTRY_RUNNER_COMMAND_TIMEOUT_MS/);
    expect(() => loadRunnerConfig({ GANTRY_LEASE_RENEW_MS: '20000', GANTRY_WORKTREE_LEASE_MS: '20000' })).toThrow(
      /GANTRY_WORKTREE_LEASE_MS \(20000 ms\) must be at least GANTRY_LEASE_RENEW_MS \+ 2 × GANTRY_RUNNER_COMMAND_TIMEOUT_MS/,
    );
  });

  it('a lease that one unanswered renewal and its retry would outlast is refused, naming the lease and the command timeout: a command timeout at the lease’s length lets a lost reply outlive the lease', () => {
    // a renewal every second, a 10 s lease and the default 10 s command timeout: the first try alone may take the whole lease
    const atTheEdge = { GANTRY_LEASE_RENEW_MS: '1000', GANTRY_JOB_LEASE_MS: '10000', GANTRY_WORKTREE_LEASE_MS: '10000' };
    expect(() => loadRunnerConfig(atTheEdge)).toThrow(SettingsError);
    expect(() => loadRunnerConfig(atTheEdge)).toThrow(/GANTRY_JOB_LEASE_MS \(10000 ms\) must be at least .*GANTRY_RUNNER_COMMAND_TIMEOUT_MS .*\(1000 \+ 2 × 10000 \+ 250 = 21250 ms\)/);
    // the interval, two whole tries and the pause between them fit in the lease: taken; a millisecond more is not
    expect(loadRunnerConfig({ ...atTheEdge, GANTRY_RUNNER_COMMAND_TIMEOUT_MS: '4375' })).toMatchObject({ jobLeaseMs: 10_000, worktreeLeaseMs: 10_000, commandTimeoutMs: 4375 });
    expect(() => loadRunnerConfig({ ...atTheEdge, GANTRY_RUNNER_COMMAND_TIMEOUT_MS: '4376' })).toThrow(/GANTRY_JOB_LEASE_MS .*= 10002 ms/);
    expect(() => loadRunnerConfig({ ...atTheEdge, GANTRY_JOB_LEASE_MS: '60000', GANTRY_RUNNER_COMMAND_TIMEOUT_MS: '4376' })).toThrow(/GANTRY_WORKTREE_LEASE_MS \(10000 ms\)/);
  });

  it('leases that are not set are derived long enough for the renewals to keep them: three intervals, or the interval plus two tries and a pause when that is longer', () => {
    expect(loadRunnerConfig({ GANTRY_LEASE_RENEW_MS: '1000' })).toMatchObject({ jobLeaseMs: 21_250, worktreeLeaseMs: 21_250 });
    expect(loadRunnerConfig({ GANTRY_LEASE_RENEW_MS: '30000', GANTRY_RUNNER_COMMAND_TIMEOUT_MS: '1000' })).toMatchObject({ jobLeaseMs: 90_000, worktreeLeaseMs: 90_000 });
  });

  it('a renewal interval whose derived job lease cannot be long enough within the 2 h a claim may ask for is refused, naming it', () => {
    expect(() => loadRunnerConfig({ GANTRY_LEASE_RENEW_MS: '7200000' })).toThrow(/GANTRY_LEASE_RENEW_MS plus 2 × GANTRY_RUNNER_COMMAND_TIMEOUT_MS .*must be at most the job lease/);
  });

  it('derived leases stay within what claim_job and acquire_worktree accept: a renewal every hour is not every claim refused as invalid', () => {
    // 3 × 1 h would be past the longest job lease a claim may ask for (2 h)
    const config = loadRunnerConfig({ GANTRY_LEASE_RENEW_MS: '3600000' });
    expect(config).toMatchObject({ jobLeaseMs: 7_200_000, worktreeLeaseMs: 10_800_000 });
    expect(JobLeaseDurationMsSchema.safeParse(config.jobLeaseMs).success).toBe(true);
    expect(LeaseDurationMsSchema.safeParse(config.worktreeLeaseMs).success).toBe(true);
  });
});
