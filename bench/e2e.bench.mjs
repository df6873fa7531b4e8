// End-to-end overhead of a job with the stand-in agent doing nothing: the job service and two
// runners as processes (plus the worktree service and a local bare origin with BENCH_WORKTREES=1).
// Reports the median (and p90) time from enqueue to the agent starting and from the agent's exit
// to the job's terminal status, split by the steps the runners log (they run at LOG_LEVEL=info),
// over BENCH_JOBS jobs (100) enqueued every BENCH_PACE_MS (400 ms: below what two runners sustain
// here without worktrees).
//   node bench/e2e.bench.mjs                       (after `npx nx run-many -t build`)
//   BENCH_WORKTREES=1 node bench/e2e.bench.mjs     (TASK_IMPLEMENTATION jobs in leased worktrees of a local origin)
//   BENCH_WORKTREES=1 BENCH_COMMIT=1 node bench/e2e.bench.mjs   (… where the agent commits a file: verified, pushed)
// Measured 2026-12-04/05 on the 2-core dev VM: docs/performance.md, "Around the agent" (with worktrees of one
// repository, jobs queue for its worktree service and the runners' slots at one every 200 ms, not at
// 400 ms; BENCH_PACE_MS=2500 keeps queueing out of the figures).
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { enqueueJob, getJob, isTerminalJobStatus } from '@gantry/contracts';
import { Bus, CommandClient } from '@gantry/messaging';
import { connectTestNats, deleteStreams, startApp } from '@gantry/testing';
import { benchName, dropSchema, natsUrl, registerBenchProduct } from './lib.mjs';

const root = resolve(import.meta.dirname, '..');
const total = Number(process.env.BENCH_JOBS ?? 100);
const paceMs = Number(process.env.BENCH_PACE_MS ?? 400);
const withWorktrees = process.env.BENCH_WORKTREES === '1';
const commits = withWorktrees && process.env.BENCH_COMMIT === '1';
const name = benchName('e2e');
const naming = { subjectRoot: name, streamPrefix: `${name.toUpperCase()}_` };
const scratch = mkdtempSync(join(tmpdir(), 'gantry-bench-e2e-'));
const processes = [];

async function start(app, schema, env = {}) {
  const child = await startApp(app, { schema, naming, env });
  processes.push(child);
  return child;
}

function median(values, q = 0.5) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

/** When each job passed each step the runner logs, by job id (its output is read as it comes: what the process keeps is only a tail). */
const runnerSteps = new Map();
const STEPS = ['job claimed', 'worktree leased', 'agent starting', 'agent exited', 'verified', 'branch pushed', 'job finished'];
function followRunnerSteps(runner) {
  let pending = '';
  runner.process.stdout.on('data', (chunk) => {
    const lines = (pending + chunk.toString()).split('\n');
    pending = lines.pop();
    for (const line of lines) {
      if (!line.startsWith('{')) continue;
      let record;
      try {
        record = JSON.parse(line);
      } catch {
        continue;
      }
      if (typeof record.jobId !== 'string' || !STEPS.includes(record.message)) continue;
      const steps = runnerSteps.get(record.jobId) ?? {};
      steps[record.message] ??= Date.parse(record.time);
      runnerSteps.set(record.jobId, steps);
    }
  });
}

function stepMedian(from, to) {
  const spans = [...runnerSteps.values()].filter((s) => s[from] !== undefined && s[to] !== undefined).map((s) => s[to] - s[from]);
  return spans.length > 0 ? `${median(spans)}ms (${spans.length})` : '-';
}

let bus;
try {
  let origin = null;
  await start('job-service', `${name}_jobs`);
  if (withWorktrees) {
    origin = join(scratch, 'origin.git');
    execFileSync('git', ['init', '-q', '--bare', '--initial-branch=main', origin]);
    const clone = join(scratch, 'clone');
    execFileSync('git', ['clone', '-q', origin, clone]);
    execFileSync('git', ['-c', 'user.name=b', '-c', 'user.email=b@b.invalid', 'commit', '-q', '--allow-empty', '-m', 'initial'], { cwd: clone });
    execFileSync('git', ['push', '-q', 'origin', 'HEAD:refs/heads/main'], { cwd: clone });
    await start('worktree-service', `${name}_worktrees`, { GANTRY_WORKTREE_ROOT: join(scratch, 'worktrees') });
  }
  for (const id of ['bench-runner-a', 'bench-runner-b']) {
    const runner = await start('runner', `${name}_runner`, {
      GANTRY_RUNNER_ID: id,
      // The runner's own steps (claimed, worktree leased, agent exited, verified, pushed, finished) for the split below.
      LOG_LEVEL: 'info',
      GANTRY_RUNNER_CONCURRENCY: '4',
      GANTRY_AGENT_BIN: join(root, 'apps/runner/bin/stand-in-claude'),
      GANTRY_RUNNER_SCRATCH_DIR: join(scratch, id),
      GANTRY_WORKTREE_ROOT: join(scratch, 'worktrees'),
    });
    followRunnerSteps(runner);
  }
  bus = await Bus.connect({ servers: natsUrl, naming, name: 'bench-e2e' });
  const client = new CommandClient(bus);

  await registerBenchProduct(client, { cloneUrl: origin ?? join(scratch, 'no-origin.git') });
  const jobs = [];
  for (let i = 0; i < total; i++) {
    const record = join(scratch, `agent-${i}.jsonl`);
    const standIn = commits
      ? { behaviour: 'commit', files: { [`bench/job-${i}.txt`]: `job ${i}\n` }, commitMessage: `bench: job ${i}` }
      : { behaviour: 'nothing' };
    const payload = { standIn: { ...standIn, recordArgvTo: record } };
    const { jobId } = await client.request(enqueueJob, {
      kind: origin ? 'TASK_IMPLEMENTATION' : 'PLAN_CHAT',
      productId: 'bench',
      ...(origin ? { branch: `bench/job-${i}` } : {}),
      payload,
      baseRef: 'main',
      idempotencyKey: `bench/enqueue:${randomUUID()}`,
      excludeFromCoalescing: true,
    });
    jobs.push({ jobId, record });
    await new Promise((r) => setTimeout(r, paceMs));
  }

  const toStart = [];
  const toTerminal = [];
  const toClaim = [];
  const claimToStart = [];
  const statuses = {};
  const deadline = Date.now() + 120_000;
  for (const { jobId, record } of jobs) {
    let view;
    for (;;) {
      view = await client.request(getJob, { jobId });
      if (isTerminalJobStatus(view.status)) break;
      if (Date.now() > deadline) throw new Error(`job ${jobId} still ${view.status}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    statuses[view.status] = (statuses[view.status] ?? 0) + 1;
    const lines = readFileSync(record, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    const started = lines.find((l) => Array.isArray(l.argv));
    const exited = lines.find((l) => 'exit' in l);
    toStart.push(Date.parse(started.at) - Date.parse(view.enqueuedAt));
    toClaim.push(Date.parse(view.claimedAt) - Date.parse(view.enqueuedAt));
    claimToStart.push(Date.parse(started.at) - Date.parse(view.claimedAt));
    toTerminal.push(Date.parse(view.finishedAt) - Date.parse(exited.at));
  }
  const kind = origin ? `TASK_IMPLEMENTATION with a worktree${commits ? ', one commit pushed' : ''}` : 'PLAN_CHAT without a worktree';
  console.log(`e2e overhead, ${total} jobs (${kind}), 2 runners x 4 slots, one enqueue every ${paceMs} ms`);
  console.log(`  enqueue -> agent start       median=${median(toStart)}ms p90=${median(toStart, 0.9)}ms max=${Math.max(...toStart)}ms`);
  console.log(`    of which enqueue -> claimed  median=${median(toClaim)}ms p90=${median(toClaim, 0.9)}ms`);
  console.log(`    of which claimed -> agent    median=${median(claimToStart)}ms p90=${median(claimToStart, 0.9)}ms (worktree lease, start_job, tool server, spawn, the agent's own boot)`);
  console.log(`  agent exit -> terminal status median=${median(toTerminal)}ms p90=${median(toTerminal, 0.9)}ms max=${Math.max(...toTerminal)}ms`);
  console.log(`  terminal statuses ${JSON.stringify(statuses)}`);
  console.log('  the runner\'s steps (from its log, medians):');
  if (origin) console.log(`    claimed -> worktree leased ${stepMedian('job claimed', 'worktree leased')}, leased -> agent starting ${stepMedian('worktree leased', 'agent starting')}`);
  console.log(`    agent exited -> job finished ${stepMedian('agent exited', 'job finished')}`);
  if (origin) {
    console.log(`      of which agent exited -> verified ${stepMedian('agent exited', 'verified')}, verified -> branch pushed ${stepMedian('verified', 'branch pushed')}, verified -> job finished ${stepMedian('verified', 'job finished')}`);
  }
} finally {
  await bus?.close();
  for (const p of processes) await p.kill('SIGKILL');
  const nc = await connectTestNats();
  await deleteStreams(nc, naming.streamPrefix);
  await nc.close();
  await dropSchema(`${name}_jobs`);
  await dropSchema(`${name}_worktrees`);
  rmSync(scratch, { recursive: true, force: true });
}
