import { ErrorCode } from '@gantry/contracts';
import { StandInJob } from '../../stand-in-agent/testing/stand-in-job.js';
import { createGitFixture, type GitFixture } from '@gantry/git/testing';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AGENT_AFTER_KILL_MS, agentEnvironment, isAgentNotStarted, runAgent, type AgentRunResult } from './agent-process.js';
import { BoundedTail, StreamMatcher } from './bounded-tail.js';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function waitUntilDead(pid: number, ms = 2000): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (!alive(pid)) return true;
    await new Promise((r) => setTimeout(r, 25));
  }
  return !alive(pid);
}

describe('running the agent process (with the stand-in agent)', () => {
  let repo: GitFixture;
  let job: StandInJob | undefined;

  beforeEach(async () => {
    repo = createGitFixture();
  });
  afterEach(async () => {
    await job?.dispose();
    job = undefined;
    await repo.cleanup();
  });

  async function run(standIn: Record<string, unknown>, options: { timeoutMs?: number; killGraceMs?: number; signal?: AbortSignal } = {}): Promise<AgentRunResult> {
    job = await StandInJob.prepare({ worktreeDir: repo.seed, standIn });
    return runAgent({ command: job.command, cwd: repo.seed, timeoutMs: options.timeoutMs ?? 20_000, killGraceMs: options.killGraceMs, signal: options.signal });
  }

  it('an agent that commits exits 0 and its story log reaches the reporter', async () => {
    const result = await run({ behaviour: 'commit', files: { 'src/feature.ts': 'export const f = 1;\n' }, commitMessage: 'feat: f' });
    expect(result).toMatchObject({ exitCode: 0, signal: null, timedOut: false, aborted: false, tokenExpired: false });
    expect(result.stdoutTail).toBe('Work committed.\n');
    const head = await repo.head();
    expect(job!.reporter.methods()).toEqual(['logImplementation', 'logCommit', 'logTestResult', 'updateJobStatus']);
    expect(job!.reporter.calls[1]!.input).toEqual({ hash: head, message: 'feat: f', summary: 'writes src/feature.ts' });
  });

  it('a hung agent is stopped with SIGTERM at its timeout', async () => {
    // Hangs without a word: an agent that logs first may not have logged within 1.5 s on a loaded
    // machine, and what it reported is not what this case is about.
    const result = await run({ behaviour: 'hang', logFirst: false }, { timeoutMs: 1500, killGraceMs: 5000 });
    // SIGTERM (not the SIGKILL that follows the grace period) is what ended it.
    expect(result).toMatchObject({ timedOut: true, exitCode: null, signal: 'SIGTERM', tokenExpired: false });
    expect(job!.reporter.methods()).toEqual([]);
  });

  it('an agent that ignores SIGTERM is killed with SIGKILL after the grace period, with everything it started', async () => {
    const result = await run({ behaviour: 'hang', ignoreSigterm: true, spawnChild: true }, { timeoutMs: 1500, killGraceMs: 700 });
    expect(result).toMatchObject({ timedOut: true, exitCode: null, signal: 'SIGKILL' });
    expect(result.stdoutTail).toContain('stand-in: ignoring SIGTERM');
    const childPid = Number(/stand-in child pid (\d+)/.exec(result.stdoutTail)?.[1]);
    expect(childPid).toBeGreaterThan(0);
    expect(await waitUntilDead(childPid)).toBe(true);
  });

  it('an agent that exits while a process it started in a new session holds its output open still ends its run', async () => {
    // setsid leaves the agent's process group, so the group's kill cannot reach it; it inherited stdout
    // and stderr, so the pipes stay open for as long as it lives (here ten minutes). The agent exits
    // once the holder has its own session (field 6 of /proc/<pid>/stat): on a busy machine the
    // holder may not have run setsid yet when the agent exits, and would go with the agent's group.
    const script = 'setsid sleep 600 & pid=$!; until [ "$(cut -d" " -f6 /proc/$pid/stat)" = "$pid" ]; do sleep 0.05; done; echo "held by $pid"; exit 0';
    const result = await runAgent({ command: { bin: 'bash', args: ['-c', script] }, cwd: repo.seed, timeoutMs: 2000, killGraceMs: 500 });
    const holder = Number(/held by (\d+)/.exec(result.stdoutTail)?.[1]);
    try {
      expect(result).toMatchObject({ exitCode: 0, signal: null, timedOut: false, groupGone: true, outputHeldOpen: true });
      expect(alive(holder)).toBe(true);
    } finally {
      if (holder > 0) process.kill(holder, 'SIGKILL');
    }
  }, 60_000);

  it('after its SIGKILL a stopped run waits at most AGENT_AFTER_KILL_MS twice, not the kill grace again, for its output and its group', async () => {
    // Ignores SIGTERM, so the kill grace runs out; a process in a new session holds its output open,
    // so the run can only end by letting go of the pipes. What the run waits after the SIGKILL is a
    // part of the runner's stop that the settings check adds up (runner-config.ts).
    const script = 'trap "" TERM; setsid sleep 600 & pid=$!; until [ "$(cut -d" " -f6 /proc/$pid/stat)" = "$pid" ]; do sleep 0.05; done; echo "held by $pid"; while true; do sleep 0.1; done';
    const killGraceMs = 3000;
    const controller = new AbortController();
    const running = runAgent({ command: { bin: 'bash', args: ['-c', script] }, cwd: repo.seed, timeoutMs: 600_000, killGraceMs, signal: controller.signal });
    await new Promise((r) => setTimeout(r, 1000));
    const abortedAt = Date.now();
    controller.abort();
    const result = await running;
    const afterAbortMs = Date.now() - abortedAt;
    const holder = Number(/held by (\d+)/.exec(result.stdoutTail)?.[1]);
    try {
      expect(result).toMatchObject({ aborted: true, signal: 'SIGKILL', outputHeldOpen: true });
      expect(afterAbortMs).toBeGreaterThanOrEqual(killGraceMs);
      expect(afterAbortMs).toBeLessThan(killGraceMs + 2 * AGENT_AFTER_KILL_MS + 500);
    } finally {
      if (holder > 0) process.kill(holder, 'SIGKILL');
    }
  }, 60_000);

  it('an agent whose output closes with its exit is not said to have left it held open', async () => {
    const result = await runAgent({ command: { bin: 'bash', args: ['-c', 'echo done'] }, cwd: repo.seed, timeoutMs: 10_000, killGraceMs: 500 });
    expect(result).toMatchObject({ exitCode: 0, stdoutTail: 'done\n', outputHeldOpen: false });
  });

  it('stopping the run through its abort signal ends the agent and says so', async () => {
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 1200);
    const result = await run({ behaviour: 'hang' }, { timeoutMs: 20_000, killGraceMs: 2000, signal: controller.signal });
    expect(result).toMatchObject({ aborted: true, timedOut: false, signal: 'SIGTERM' });
  });

  it('the expired-token message marks the token expired', async () => {
    const result = await run({ behaviour: 'token_expired_message' });
    expect(result).toMatchObject({ exitCode: 1, tokenExpired: true, timedOut: false });
    expect(job!.reporter.calls).toEqual([]);
  });

  it('exit code 3 marks the token expired', async () => {
    const result = await run({ behaviour: 'exit_3' });
    expect(result).toMatchObject({ exitCode: 3, tokenExpired: true });
  });

  it('another non-zero exit is reported as it is, without an expired token', async () => {
    const result = await run({ behaviour: 'exit_nonzero', exitCode: 7 });
    expect(result).toMatchObject({ exitCode: 7, tokenExpired: false, timedOut: false });
    expect(result.stderrTail).toContain('giving up with exit code 7');
    expect(job!.reporter.methods()).toEqual(['logImplementation']);
  });

  it('a binary that does not exist is an error, not a result', async () => {
    await expect(
      runAgent({ command: { bin: '/nonexistent/claude', args: ['-p', 'x'] }, cwd: repo.seed, timeoutMs: 5000 }),
    ).rejects.toMatchObject({ code: ErrorCode.INTERNAL });
  });

  it.each([0, -1, 1.5, 2 ** 31])('refuses a timeout of %p ms instead of killing the agent at once', async (timeoutMs) => {
    await expect(runAgent({ command: { bin: process.execPath, args: ['-e', ''] }, cwd: repo.seed, timeoutMs })).rejects.toMatchObject({
      code: ErrorCode.INVALID_COMMAND,
    });
  });

  it('keeps only the tail of a large output and still sees an expired token printed early in it', async () => {
    const script = "process.stdout.write('OAuth token has expired\\n'); process.stdout.write('x'.repeat(300000)); process.stdout.write('\\nend\\n'); process.exitCode = 1;";
    const result = await runAgent({ command: { bin: process.execPath, args: ['-e', script] }, cwd: repo.seed, timeoutMs: 10_000, outputTailBytes: 1024 });
    expect(result.exitCode).toBe(1);
    expect(Buffer.byteLength(result.stdoutTail)).toBe(1024);
    expect(result.stdoutTail.endsWith('x\nend\n')).toBe(true);
    expect(result.stdoutTail).not.toContain('expired');
    expect(result.tokenExpired).toBe(true);
  });

  it("an agent that succeeded is not taken for an expired token because its answer mentions one (docs/jobs.md, \"Leases and liveness\")", async () => {
    // The work of a task about authentication: the CLI's final answer names what it fixed.
    const script = "console.log('Fixed: the API now answers 401 Unauthorized when the token has expired.'); console.error('authentication_error handled');";
    const result = await runAgent({ command: { bin: process.execPath, args: ['-e', script] }, cwd: repo.seed, timeoutMs: 10_000 });
    expect(result).toMatchObject({ exitCode: 0, tokenExpired: false });
  });

  it('finds the token-expired words within one stream only, never in stdout and stderr read together', async () => {
    // "token " on stdout, then "expired" on stderr: each stream alone holds no match; read as one
    // text, in the order the chunks arrive, they would spell the CLI's own failure.
    const script = "printf 'the token '; sleep 0.3; printf 'expired\\n' >&2; exit 1";
    const result = await runAgent({ command: { bin: 'bash', args: ['-c', script] }, cwd: repo.seed, timeoutMs: 10_000 });
    expect(result).toMatchObject({ exitCode: 1, stdoutTail: 'the token ', stderrTail: 'expired\n', tokenExpired: false });
    const onStderr = await runAgent({ command: { bin: 'bash', args: ['-c', "printf 'the token ' >&2; sleep 0.3; printf 'expired\\n' >&2; exit 1"] }, cwd: repo.seed, timeoutMs: 10_000 });
    expect(onStderr.tokenExpired).toBe(true);
  });

  it('an agent the runner stopped (its timeout, an abort) is not taken for an expired token, whatever its output said (docs/jobs.md, "Leases and liveness")', async () => {
    // Its last words before it hung happen to be the CLI's expired-token message; the runner killed it.
    // The timeout leaves it seconds to say them on a loaded machine; the abort waits until it has.
    const said = join(repo.seed, '.said');
    const script = `echo 'OAuth token has expired'; echo 'authentication_error' >&2; touch '${said}'; exec sleep 600`;
    const timedOut = await runAgent({ command: { bin: 'bash', args: ['-c', script] }, cwd: repo.seed, timeoutMs: 5000, killGraceMs: 2000 });
    expect(timedOut).toMatchObject({ timedOut: true, exitCode: null, signal: 'SIGTERM', tokenExpired: false });
    expect(timedOut.stdoutTail).toContain('token has expired');
    rmSync(said);
    const controller = new AbortController();
    const stopped = runAgent({ command: { bin: 'bash', args: ['-c', script] }, cwd: repo.seed, timeoutMs: 600_000, killGraceMs: 2000, signal: controller.signal });
    while (!existsSync(said)) await new Promise((r) => setTimeout(r, 25));
    controller.abort();
    const result = await stopped;
    expect(result).toMatchObject({ aborted: true, timedOut: false, signal: 'SIGTERM', tokenExpired: false });
    expect(result.stderrTail).toContain('authentication_error');
  });

  it('uses a configured token-expired pattern instead of the default', async () => {
    const script = "console.log('session revoked by admin'); console.log('401 Unauthorized'); process.exitCode = 1;";
    const result = await runAgent({
      command: { bin: process.execPath, args: ['-e', script] },
      cwd: repo.seed,
      timeoutMs: 10_000,
      tokenExpiredPattern: /session revoked/g,
    });
    expect(result.tokenExpired).toBe(true);
    const notMatching = await runAgent({
      command: { bin: process.execPath, args: ['-e', "console.log('401 Unauthorized'); process.exitCode = 1;"] },
      cwd: repo.seed,
      timeoutMs: 10_000,
      tokenExpiredPattern: /session revoked/,
    });
    expect(notMatching.tokenExpired).toBe(false);
  });
});

describe('the agent environment', () => {
  it("passes what the CLI needs and keeps the runner's own configuration out", () => {
    const env = agentEnvironment(
      { GANTRY_JOB_ID: 'job-1' },
      { PATH: '/usr/bin', HOME: '/home/runner', ANTHROPIC_API_KEY: 'k', CLAUDE_CONFIG_DIR: '/c', GANTRY_DATABASE_URL: 'postgres://x', GANTRY_NATS_URL: 'nats://y', AWS_SECRET_ACCESS_KEY: 's' },
    );
    expect(env).toEqual({ PATH: '/usr/bin', HOME: '/home/runner', ANTHROPIC_API_KEY: 'k', CLAUDE_CONFIG_DIR: '/c', GANTRY_JOB_ID: 'job-1' });
  });

  it("keeps the host's effort level out: the CLI takes it over --effort, and the job's own effort (or none) would not be the one it runs with", () => {
    const env = agentEnvironment({}, { HOME: '/home/runner', CLAUDE_CONFIG_DIR: '/c', CLAUDE_CODE_EFFORT_LEVEL: 'max', ANTHROPIC_API_KEY: 'k' });
    expect(env).toEqual({ HOME: '/home/runner', CLAUDE_CONFIG_DIR: '/c', ANTHROPIC_API_KEY: 'k' });
  });

  it("keeps PATH's absolute entries only: '.', an empty entry and a relative one would name the worktree's files", () => {
    expect(agentEnvironment({}, { PATH: `.:/usr/local/bin::bin:/usr/bin:` }).PATH).toBe('/usr/local/bin:/usr/bin');
    // an empty PATH is the current directory again: none is passed, and the system's default path applies
    expect(agentEnvironment({}, { PATH: '.::' })).not.toHaveProperty('PATH');
  });

  it("never starts a repository's file as the agent, whatever relative entries the runner's PATH has", async () => {
    const worktree = mkdtempSync(join(tmpdir(), 'gantry-agent-path-'));
    try {
      // what a hostile repository would commit: an executable named as the agent, at its root and in bin/
      const fake = `#!/bin/sh\ntouch "${join(worktree, 'started')}"\n`;
      mkdirSync(join(worktree, 'bin'));
      for (const file of [join(worktree, 'gantry-spec-agent'), join(worktree, 'bin', 'gantry-spec-agent')]) writeFileSync(file, fake, { mode: 0o755 });
      for (const PATH of ['.:/usr/bin:/bin', ':/usr/bin', 'bin:/usr/bin', '.']) {
        const outcome = await runAgent({ command: { bin: 'gantry-spec-agent', args: [] }, cwd: worktree, env: agentEnvironment({}, { PATH }), timeoutMs: 10_000 }).then(
          () => 'started',
          (error: unknown) => (isAgentNotStarted(error) ? 'not started' : String(error)),
        );
        expect({ PATH, outcome, started: existsSync(join(worktree, 'started')) }).toEqual({ PATH, outcome: 'not started', started: false });
      }
    } finally {
      rmSync(worktree, { recursive: true, force: true });
    }
  });
});

describe('output bounds', () => {
  it('a bounded tail keeps the last bytes across chunks', () => {
    const tail = new BoundedTail(5);
    for (const part of ['abc', 'defg', 'h']) tail.push(Buffer.from(part));
    expect(tail.toString()).toBe('defgh');
    expect(tail.droppedBytes).toBe(3);
  });

  it('a stream matcher finds a pattern split across two chunks', () => {
    const matcher = new StreamMatcher(/token has expired/i);
    matcher.push(Buffer.from('... OAuth token ha'));
    expect(matcher.matched).toBe(false);
    matcher.push(Buffer.from('s expired. Please log in'));
    expect(matcher.matched).toBe(true);
  });

  it('a stream matcher reads a character split across two chunks as that character', () => {
    const matcher = new StreamMatcher(/café expired/);
    const text = Buffer.from('café expired');
    const cut = text.indexOf(0xa9); // the second byte of é
    matcher.push(text.subarray(0, cut));
    matcher.push(text.subarray(cut));
    expect(matcher.matched).toBe(true);
  });
});
