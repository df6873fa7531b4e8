import { removeTestNamespace, startApp, startAppExpectingExit, startupRefusal as refusal, testNaming, uniqueName, type App } from '@gantry/testing';

/**
 * Each service reads its settings once, validated, at boot: a bad value stops the process before it
 * does anything, with a message naming the variable and never printing a value (it may be a secret).
 * See docs/configuration.md.
 */
async function startWith(app: App, env: Record<string, string>) {
  const name = uniqueName(`settings_${app}`);
  const naming = testNaming(name);
  try {
    return await startAppExpectingExit(app, { schema: name, naming, env });
  } finally {
    await removeTestNamespace(naming, name);
  }
}

describe('a bad setting stops the service at boot, naming the variable', () => {
  it.each<[App, string, string]>([
    // numbers shared by every service
    ['job-service', 'GANTRY_COMMAND_CONCURRENCY', 'lots'],
    ['workflow-engine', 'GANTRY_COMMAND_CONCURRENCY', '0'],
    ['job-service', 'GANTRY_SHUTDOWN_GRACE_MS', 'soon'],
    ['worktree-service', 'GANTRY_SHUTDOWN_GRACE_MS', '-1'],
    ['job-service', 'GANTRY_STREAM_REPLICAS', 'three'],
    ['pr-service', 'GANTRY_STREAM_REPLICAS', '7'],
    ['runner', 'GANTRY_STREAM_REPLICAS', '1.5'],
    ['job-service', 'GANTRY_READY_RELAY_MAX_AGE_MS', 'a minute'],
    ['job-service', 'PORT', '70000'],
    ['job-service', 'GANTRY_DB_POOL_MAX', '3'],
    // beyond what a timer holds (it would fire every millisecond), beyond what JetStream takes
    ['job-service', 'GANTRY_PRUNE_INTERVAL_MS', '2592000000'],
    ['workflow-engine', 'GANTRY_STREAM_MAX_AGE_MS', '10000000000000'],
    ['pr-service', 'GANTRY_DB_POOL_MAX', 'many'],
    // numbers of one service
    ['job-service', 'GANTRY_LEASE_SWEEP_MS', 'fast'],
    ['worktree-service', 'GANTRY_WORKTREE_SWEEP_INTERVAL_MS', 'often'],
    ['pr-service', 'GANTRY_PR_RESYNC_INTERVAL_MS', '-5'],
    ['workflow-engine', 'GANTRY_WORKFLOW_RUN_QUEUE_PATIENCE_MS', '30s'],
    // tries of an enqueue after the run queue's 24 h window would queue the run again
    ['workflow-engine', 'GANTRY_WORKFLOW_RUN_QUEUE_PATIENCE_MS', '86400000'],
    // receipts that go before the streams drop a message (7 days by default): docs/architecture.md, "How late a command comes again"
    ['job-service', 'GANTRY_RECEIPT_TTL_MS', '3600000'],
    ['runner', 'GANTRY_RUNNER_CONCURRENCY', '0'],
    // the runner's stop would outlast the process's grace (docs/jobs.md, "Stopping a runner")
    ['runner', 'GANTRY_RUNNER_SHUTDOWN_GRACE_MS', '60000'],
    // a lease the renewals (every 60 s by default) cannot keep (docs/jobs.md, "Leases and liveness")
    ['runner', 'GANTRY_JOB_LEASE_MS', '30000'],
    ['runner', 'GANTRY_WORKTREE_LEASE_MS', '60000'],
    // a first backoff pause above the cap (30 s by default) would make every pause the cap
    ['runner', 'GANTRY_RUNNER_BACKOFF_INITIAL_MS', '60000'],
    // the stand-ins of a job that names no repository or target branch, by a job's own rules (docs/jobs.md, "Branches")
    ['runner', 'GANTRY_TARGET_BRANCH', '--upload-pack=touch'],
    ['runner', 'GANTRY_REPOSITORY_URL', 'ext::sh'],
    ['runner', 'GANTRY_REPOSITORY_URL', 'repos/app.git'],
    // one of a set, URLs
    ['runner', 'GANTRY_RUNNER_KINDS', 'TASK_IMPLEMENTATION,DEPLOY'],
    ['job-service', 'GANTRY_DATABASE_URL', 'not a url'],
    ['pr-service', 'GANTRY_GITHUB_API_URL', 'api.github.com'],
    // on/off
    ['workflow-engine', 'GANTRY_WORKFLOW_OFFICE_ACTIONS', 'maybe'],
  ])('%s with %s=%j exits non-zero naming it', async (app, variable, value) => {
    const result = await startWith(app, { [variable]: value });
    expect(result.started).toBe(false);
    expect(result.code).not.toBe(0);
    expect(result.code).not.toBeNull();
    expect(refusal(result.output)).toContain(variable);
  });

  it('GANTRY_COMMAND_CONCURRENCY that is not a number no longer means "no limit"', async () => {
    const result = await startWith('job-service', { GANTRY_COMMAND_CONCURRENCY: 'unlimited' });
    expect({ started: result.started, refusal: refusal(result.output) }).toEqual({ started: false, refusal: expect.stringContaining('GANTRY_COMMAND_CONCURRENCY') });
  });

  it('GANTRY_SHUTDOWN_GRACE_MS that is not a number is refused at boot, not discovered as exit 1 on SIGTERM', async () => {
    const result = await startWith('job-service', { GANTRY_SHUTDOWN_GRACE_MS: '30 seconds' });
    expect({ started: result.started, refusal: refusal(result.output) }).toEqual({ started: false, refusal: expect.stringContaining('GANTRY_SHUTDOWN_GRACE_MS') });
  });

  it('a valid GANTRY_SHUTDOWN_GRACE_MS is honoured: SIGTERM exits 0', async () => {
    const name = uniqueName('settings_grace');
    const naming = testNaming(name);
    try {
      const running = await startApp('job-service', { schema: name, naming, env: { GANTRY_SHUTDOWN_GRACE_MS: '20000' } });
      expect(await running.kill('SIGTERM')).toBe(0);
    } finally {
      await removeTestNamespace(naming, name);
    }
  });

  it('GANTRY_STREAM_REPLICAS is checked: not a number, 0 and more than a cluster holds are refused', async () => {
    for (const value of ['one', '0', '6']) {
      const result = await startWith('job-service', { GANTRY_STREAM_REPLICAS: value });
      expect({ value, started: result.started, refusal: refusal(result.output) }).toEqual({ value, started: false, refusal: expect.stringContaining('GANTRY_STREAM_REPLICAS') });
    }
  });

  it("a refused start writes JSON lines only (Nest's report of the failure too), and no value", async () => {
    const result = await startWith('job-service', { GANTRY_COMMAND_CONCURRENCY: 'unlimited', LOG_LEVEL: 'info' });
    expect(result.started).toBe(false);
    const lines = result.output.split('\n').filter((line) => line.trim() !== '');
    expect(lines.filter((line) => !/^\{.*\}$/.test(line) || !JSON.parse(line))).toEqual([]);
    expect(lines.length).toBeGreaterThan(0);
    expect(result.output).not.toContain('unlimited');
  });

  it('names every bad variable at once', async () => {
    const result = await startWith('worktree-service', { GANTRY_COMMAND_CONCURRENCY: 'x', GANTRY_WORKTREE_MAX_PER_REPOSITORY: 'y' });
    expect(result.started).toBe(false);
    expect(refusal(result.output)).toEqual(expect.stringContaining('GANTRY_COMMAND_CONCURRENCY'));
    expect(refusal(result.output)).toEqual(expect.stringContaining('GANTRY_WORKTREE_MAX_PER_REPOSITORY'));
  });

  it('LOG_LEVEL is one of the settings: refused with the others on the one refusal line, its value not quoted', async () => {
    const result = await startWith('job-service', { LOG_LEVEL: 'loud', GANTRY_COMMAND_CONCURRENCY: 'x' });
    expect(result.started).toBe(false);
    const line = result.output.split('\n').find((l) => l.includes('service failed to start'));
    expect(line).toContain('LOG_LEVEL');
    expect(line).toContain('GANTRY_COMMAND_CONCURRENCY');
    expect(line).not.toContain('loud');
  });

  it('never prints the value of a refused setting: credentials in a bad URL, a token beside an App', async () => {
    const nats = await startWith('job-service', { GANTRY_NATS_URL: 'nats://gantry:hunter2-nats-password@[::1' });
    expect(nats.started).toBe(false);
    expect(refusal(nats.output)).toContain('GANTRY_NATS_URL');
    expect(nats.output).not.toContain('hunter2-nats-password');

    const github = await startWith('pr-service', { GANTRY_GITHUB_TOKEN: 'ghp_settingsSpecTokenValue0001', GANTRY_GITHUB_APP_ID: '12345' });
    expect(github.started).toBe(false);
    expect(refusal(github.output)).toContain('GANTRY_GITHUB_TOKEN');
    expect(github.output).not.toContain('ghp_settingsSpecTokenValue0001');

    const runner = await startWith('runner', { GANTRY_REPOSITORY_URL: 'https://bot:ghp_settingsSpecRunnerToken0001@git.example.com/app.git' });
    expect(runner.started).toBe(false);
    expect(refusal(runner.output)).toContain('GANTRY_REPOSITORY_URL');
    expect(runner.output).not.toContain('ghp_settingsSpecRunnerToken0001');
  });
});
