// The kill -9 run (docs/jobs.md): CHAOS_JOBS jobs (40) through the job service, the worktree service and
// two runners over a local bare origin with a push log, while one of the four processes is SIGKILLed and
// started again every few seconds (CHAOS_KILLS, 15), with cancels and duplicate enqueues. Prints the
// invariant table and exits 1 when an invariant does not hold:
//   every job terminal; FAILED only for the job's own reasons (the ones its script asks for);
//   no FAILED job with a pushed branch; at most one push per branch; every worktree lease released and
//   no worktree directory the worktree service does not know; one push per DONE branch; no two agents alive
//   in one worktree at once (from each agent's start, signs of life and exit); both services' projections
//   equal to a rebuild from their logs once every process is stopped.
//   npm run bench -- chaos            (builds first)
//   node bench/chaos.bench.mjs        (after `npx nx run-many -t build`)
// Measured 2026-12-01 on the 2-core dev VM (load ~13 from other work): 40 jobs, 15 SIGKILLs (worktree service x5,
// runner a x5, runner b x2, job service x3): DONE 28, FAILED 8 (each as its script asked), CANCELLED 4, no job
// past its first attempt, 28 pushes for 28 DONE branches, 41 agent runs in 36 worktrees without overlap, both
// services' projections equal to a rebuild; every invariant held.
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { cancelJob, enqueueJob, getJob, isTerminalJobStatus, listWorktreeLeases, listWorktrees, registerProduct } from '@gantry/contracts';
import { Bus, CommandClient, readAllPages } from '@gantry/messaging';
import { createPool, EventStore, rebuildProjections } from '@gantry/eventstore';
import { connectTestNats, deleteStreams, startApp, testDatabaseUrl } from '@gantry/testing';
import { jobServiceProjections } from '../apps/job-service/dist/infrastructure/projections.js';
import { worktreeServiceProjections } from '../apps/worktree-service/dist/infrastructure/persistence/projections.js';
import { benchName, dropSchema, natsUrl } from './lib.mjs';

const root = resolve(import.meta.dirname, '..');
const total = Number(process.env.CHAOS_JOBS ?? 40);
const kills = Number(process.env.CHAOS_KILLS ?? 15);
const name = benchName('chaos');
const naming = { subjectRoot: name, streamPrefix: `${name.toUpperCase()}_` };
const scratch = mkdtempSync(join(tmpdir(), 'gantry-chaos-'));
const worktreeRoot = join(scratch, 'worktrees');
// Each agent appends its start (argv, pid, cwd), a sign of life every 100 ms and its exit here.
const records = join(scratch, 'records');
mkdirSync(records);
const random = (n) => Math.floor(Math.random() * n);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** The four processes, each started again under the same settings after a kill. */
const services = {
  'job-service': { app: 'job-service', schema: `${name}_jobs`, env: { GANTRY_LEASE_SWEEP_MS: '200' } },
  'worktree-service': {
    app: 'worktree-service',
    schema: `${name}_worktrees`,
    env: { GANTRY_WORKTREE_ROOT: worktreeRoot, GANTRY_WORKTREE_SWEEP_INTERVAL_MS: '200', GANTRY_WORKTREE_LOCK_TIMEOUT_MS: '60000' },
  },
  ...Object.fromEntries(
    ['chaos-runner-a', 'chaos-runner-b'].map((id) => [
      id,
      {
        app: 'runner',
        schema: `${name}_runner`,
        env: {
          GANTRY_RUNNER_ID: id,
          GANTRY_RUNNER_CONCURRENCY: '3',
          GANTRY_AGENT_BIN: join(root, 'apps/runner/bin/stand-in-claude'),
          GANTRY_RUNNER_SCRATCH_DIR: join(scratch, 'scratch', id),
          GANTRY_WORKTREE_ROOT: worktreeRoot,
          GANTRY_LEASE_RENEW_MS: '1000',
          GANTRY_JOB_LEASE_MS: '20000',
          GANTRY_WORKTREE_LEASE_MS: '20000',
          GANTRY_AGENT_KILL_GRACE_MS: '1000',
          GANTRY_OFFER_ACK_WAIT_MS: '5000',
          GANTRY_RUNNER_COMMAND_TIMEOUT_MS: '3000',
          GANTRY_RUNNER_SHUTDOWN_GRACE_MS: '2000',
        },
      },
    ]),
  ),
};
const running = new Map();

async function start(key) {
  const { app, schema, env } = services[key];
  const child = await startApp(app, { schema, naming, env, readyTimeoutMs: 60_000 });
  running.set(key, child);
  return child;
}

function git(cwd, args) {
  return execFileSync('git', ['-c', 'user.name=chaos', '-c', 'user.email=chaos@gantry.invalid', ...args], { cwd, encoding: 'utf8', stdio: 'pipe' }).trim();
}

/** What a job's script asks for, and so which terminal statuses are its own. */
function planJob(i) {
  const roll = i % 10;
  if (roll === 7) return { label: 'failing-tests', expect: ['FAILED'], ownError: /^test failure: /, standIn: { behaviour: 'failing_tests', files: { [`src/f${i}.ts`]: `${i}\n` } } };
  if (roll === 8) return { label: 'nothing', expect: ['FAILED'], ownError: /^verify produced no output$/, standIn: { behaviour: 'nothing', delayMs: 300 } };
  if (roll === 9) return { label: 'cancelled', expect: ['CANCELLED'], cancel: true, standIn: { behaviour: 'hang' } };
  return { label: 'commit', expect: ['DONE'], standIn: { behaviour: 'commit', delayMs: 500 + random(2500), files: { [`src/c${i}.ts`]: `export const c${i} = ${i};\n` } } };
}

let bus;
let failed = false;
try {
  const origin = join(scratch, 'origin.git');
  const pushLog = join(scratch, 'pushes.log');
  git(scratch, ['init', '-q', '--bare', '--initial-branch=main', origin]);
  writeFileSync(join(origin, 'hooks', 'post-receive'), `#!/bin/sh\nwhile read old new ref; do echo "$old $new $ref" >> "${pushLog}"; done\n`);
  chmodSync(join(origin, 'hooks', 'post-receive'), 0o755);
  const clone = join(scratch, 'clone');
  git(scratch, ['clone', '-q', origin, clone]);
  writeFileSync(join(clone, 'README.md'), '# chaos\n');
  git(clone, ['add', 'README.md']);
  git(clone, ['commit', '-q', '-m', 'initial']);
  git(clone, ['push', '-q', 'origin', 'HEAD:refs/heads/main']);
  writeFileSync(pushLog, '');

  for (const key of Object.keys(services)) await start(key);
  bus = await Bus.connect({ servers: natsUrl, naming, name: 'bench-chaos' });
  const client = new CommandClient(bus);
  // The test client itself keeps asking while a service is down.
  const ask = (contract, payload) => client.request(contract, payload, { timeoutMs: 3000, retryUntil: Date.now() + 120_000 });
  await ask(registerProduct, {
    productId: 'chaos', repository: 'chaos/chaos', cloneUrl: origin, targetBranch: 'main',
    prStrategy: 'STORY', mergeMethod: 'SQUASH', requiredChecks: [], idempotencyKey: 'chaos/register:1',
  });

  // Enqueue (one in five twice, concurrently, under the same key), kill, cancel — all at once.
  const jobs = [];
  let duplicates = 0;
  const enqueueAll = (async () => {
    for (let i = 0; i < total; i++) {
      const plan = planJob(i);
      const request = {
        kind: 'TASK_IMPLEMENTATION',
        productId: 'chaos',
        taskId: `T-${i}`,
        branch: `chaos/job-${i}`,
        baseRef: 'main',
        payload: { standIn: { ...plan.standIn, recordArgvTo: join(records, `${i}.jsonl`), lifeSignMs: 100 } },
        idempotencyKey: `chaos/enqueue:${randomUUID()}`,
        excludeFromCoalescing: true,
      };
      const twice = i % 5 === 0;
      const replies = await Promise.all((twice ? [1, 2] : [1]).map(() => ask(enqueueJob, request)));
      if (twice) {
        duplicates++;
        if (replies[0].jobId !== replies[1].jobId) throw new Error(`a duplicate enqueue made a second job: ${replies.map((r) => r.jobId)}`);
      }
      jobs.push({ i, jobId: replies[0].jobId, branch: request.branch, ...plan });
      await sleep(300 + random(400));
    }
  })();
  const killLog = [];
  const chaos = (async () => {
    const keys = Object.keys(services);
    for (let k = 0; k < kills; k++) {
      await sleep(3000 + random(4000));
      const key = keys[random(keys.length)];
      await running.get(key).kill('SIGKILL');
      killLog.push(key);
      await sleep(500 + random(2500));
      await start(key);
    }
  })();
  const cancels = (async () => {
    const done = new Set();
    while (done.size < Math.floor(total / 10)) {
      await sleep(1000);
      for (const job of jobs.filter((j) => j.cancel && !done.has(j.jobId))) {
        const view = await ask(getJob, { jobId: job.jobId }).catch(() => null);
        if (view && ['CLAIMED', 'RUNNING'].includes(view.status)) {
          await ask(cancelJob, { jobId: job.jobId, idempotencyKey: `chaos/cancel:${job.jobId}` }).catch(() => undefined);
          done.add(job.jobId);
        }
      }
    }
  })();
  await Promise.all([enqueueAll, chaos, cancels]);

  // Every job terminal, with every process up.
  const deadline = Date.now() + 300_000;
  const views = new Map();
  for (const job of jobs) {
    for (;;) {
      const view = await ask(getJob, { jobId: job.jobId });
      if (isTerminalJobStatus(view.status)) {
        views.set(job.jobId, view);
        break;
      }
      if (Date.now() > deadline) {
        views.set(job.jobId, view);
        break;
      }
      await sleep(250);
    }
  }
  // Leases released, directories accounted for.
  const leaseDeadline = Date.now() + 60_000;
  let live = [];
  for (;;) {
    const leases = await readAllPages((cursor) => ask(listWorktreeLeases, { limit: 1000, ...(cursor ? { cursor } : {}) }), (page) => page.leases);
    live = leases.filter((l) => ['acquiring_lock', 'creating_or_reusing', 'syncing', 'ready', 'releasing'].includes(l.status));
    if (live.length === 0 || Date.now() > leaseDeadline) break;
    await sleep(500);
  }
  const worktrees = await readAllPages((cursor) => ask(listWorktrees, { limit: 1000, ...(cursor ? { cursor } : {}) }), (page) => page.worktrees);
  const known = new Set(worktrees.map((w) => w.worktreeKey));
  const dir = join(worktreeRoot, 'worktrees');
  const onDisk = existsSync(dir) ? readdirSync(dir) : [];
  const stray = onDisk.filter((d) => !known.has(d));

  const pushes = readFileSync(pushLog, 'utf8').split('\n').filter(Boolean).map((l) => l.split(' ')[2]);
  const pushesOf = (branch) => pushes.filter((ref) => ref === `refs/heads/${branch}`).length;
  const onOrigin = (branch) => git(origin, ['for-each-ref', '--format=%(objectname)', `refs/heads/${branch}`]) !== '';

  const notTerminal = jobs.filter((j) => !isTerminalJobStatus(views.get(j.jobId).status));
  const notOwnFailure = jobs.filter((j) => {
    const v = views.get(j.jobId);
    return v.status === 'FAILED' && !(j.ownError && j.ownError.test(v.error ?? ''));
  });
  const unexpected = jobs.filter((j) => isTerminalJobStatus(views.get(j.jobId).status) && !j.expect.includes(views.get(j.jobId).status) && views.get(j.jobId).status !== 'CANCELLED');
  const failedPushed = jobs.filter((j) => views.get(j.jobId).status === 'FAILED' && (onOrigin(j.branch) || views.get(j.jobId).pushedAt !== null));
  const pushedTwice = jobs.filter((j) => pushesOf(j.branch) > 1);
  const doneUnpushed = jobs.filter((j) => views.get(j.jobId).status === 'DONE' && (!onOrigin(j.branch) || views.get(j.jobId).headSha === null));

  // Agents that overlapped in one worktree: each agent lived from its start to its last line (its exit,
  // or its last sign of life when it was killed without a word); two agents in one directory must not meet.
  const agents = [];
  for (const job of jobs) {
    const record = join(records, `${job.i}.jsonl`);
    // no file: the job never got as far as its agent (cancelled or finished before it)
    const lines = (existsSync(record) ? readFileSync(record, 'utf8') : '').split('\n').filter(Boolean).map((l) => JSON.parse(l));
    for (const start of lines.filter((l) => Array.isArray(l.argv))) {
      const last = Math.max(...lines.filter((l) => l.pid === start.pid).map((l) => Date.parse(l.at)));
      agents.push({ job: job.i, pid: start.pid, cwd: start.cwd, from: Date.parse(start.at), to: last });
    }
  }
  const overlaps = [];
  for (const cwd of new Set(agents.map((a) => a.cwd))) {
    const inDir = agents.filter((a) => a.cwd === cwd).sort((a, b) => a.from - b.from);
    for (let k = 1; k < inDir.length; k++) {
      if (inDir[k].from < inDir[k - 1].to) overlaps.push(`job ${inDir[k - 1].job} pid ${inDir[k - 1].pid} / job ${inDir[k].job} pid ${inDir[k].pid}`);
    }
  }
  const donePushedOnce = jobs.filter((j) => views.get(j.jobId).status === 'DONE' && pushesOf(j.branch) !== 1);

  // Every process stopped: the read models must equal a rebuild from the log.
  for (const p of running.values()) await p.kill('SIGKILL');
  running.clear();
  const rebuiltEqual = [];
  for (const [schema, projections] of [[`${name}_jobs`, jobServiceProjections], [`${name}_worktrees`, worktreeServiceProjections]]) {
    const pool = createPool({ url: testDatabaseUrl, schema });
    try {
      const tables = projections.flatMap((p) => p.tables);
      const snapshot = async () => {
        const all = {};
        for (const table of tables) all[table] = (await pool.query(`SELECT t::text AS row FROM ${table} t ORDER BY 1`)).rows.map((r) => r.row);
        return JSON.stringify(all);
      };
      const live = await snapshot();
      await rebuildProjections(new EventStore({ pool, schema }), projections);
      rebuiltEqual.push([schema.slice(name.length + 1), live === (await snapshot()), tables.length]);
    } finally {
      await pool.end();
    }
  }

  const byStatus = {};
  for (const v of views.values()) byStatus[v.status] = (byStatus[v.status] ?? 0) + 1;
  const attempts = [...views.values()].map((v) => v.attempt);
  const rows = [
    ['every job terminal', notTerminal.length === 0, `${jobs.length - notTerminal.length}/${jobs.length} terminal`],
    ['FAILED only for the job\'s own reasons', notOwnFailure.length === 0, notOwnFailure.length === 0 ? `${byStatus.FAILED ?? 0} FAILED, each as its script asked` : notOwnFailure.map((j) => `${j.label} #${j.i}: ${views.get(j.jobId).error}`).join('; ')],
    ['each job ended as its script asked (or CANCELLED)', unexpected.length === 0, unexpected.length === 0 ? 'yes' : unexpected.map((j) => `${j.label} #${j.i}: ${views.get(j.jobId).status}`).join('; ')],
    ['no FAILED job with a pushed branch', failedPushed.length === 0, failedPushed.length === 0 ? 'none' : failedPushed.map((j) => j.branch).join(', ')],
    ['every DONE branch on the origin with its head', doneUnpushed.length === 0, doneUnpushed.length === 0 ? `${byStatus.DONE ?? 0} DONE` : doneUnpushed.map((j) => j.branch).join(', ')],
    ['at most one push per branch', pushedTwice.length === 0, pushedTwice.length === 0 ? `${pushes.length} pushes` : pushedTwice.map((j) => `${j.branch} x${pushesOf(j.branch)}`).join(', ')],
    ['one push per DONE branch', donePushedOnce.length === 0, donePushedOnce.length === 0 ? `${byStatus.DONE ?? 0} DONE branches, each pushed once` : donePushedOnce.map((j) => `${j.branch} x${pushesOf(j.branch)}`).join(', ')],
    ['no overlapping agents in one worktree', overlaps.length === 0, overlaps.length === 0 ? `${agents.length} agent runs in ${new Set(agents.map((a) => a.cwd)).size} directories` : overlaps.join('; ')],
    ['every worktree lease released', live.length === 0, `${live.length} still held`],
    ['no stray worktree directory', stray.length === 0, stray.length === 0 ? `${onDisk.length} on disk, all known to the worktree service` : stray.join(', ')],
    ...rebuiltEqual.map(([service, equal, tables]) => [`${service} projections equal to a rebuild`, equal, `${tables} tables`]),
  ];
  console.log(`kill -9 run: ${jobs.length} jobs (${duplicates} enqueued twice under one key), ${killLog.length} SIGKILLs, cancels of ${jobs.filter((j) => j.cancel).length} running jobs`);
  console.log(`  kills: ${Object.entries(killLog.reduce((m, k) => ({ ...m, [k]: (m[k] ?? 0) + 1 }), {})).map(([k, n]) => `${k} x${n}`).join(', ')}`);
  console.log(`  statuses: ${Object.entries(byStatus).map(([s, n]) => `${s} ${n}`).join(', ')}; attempts: max ${Math.max(...attempts)}, jobs past their first ${attempts.filter((a) => a > 1).length}`);
  console.log('');
  console.log('| invariant | holds | detail |');
  console.log('|---|---|---|');
  for (const [what, ok, detail] of rows) console.log(`| ${what} | ${ok ? 'yes' : 'NO'} | ${detail} |`);
  failed = rows.some(([, ok]) => !ok);
} finally {
  await bus?.close();
  for (const p of running.values()) await p.kill('SIGKILL');
  const nc = await connectTestNats();
  await deleteStreams(nc, naming.streamPrefix);
  await nc.close();
  await dropSchema(`${name}_jobs`);
  await dropSchema(`${name}_worktrees`);
  rmSync(scratch, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
