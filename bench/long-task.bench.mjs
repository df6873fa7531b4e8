// Moves of one task between two steps as its stream grows: the median time of a move_task (sent →
// answered) over the last BENCH_LONG_TASK_SAMPLE moves before each checkpoint, with the task stream's
// length then. The job service and the workflow engine run as their own processes on throw-away
// schemas; the steps declare no actions, so a move is the engine's own work on the task's stream.
//   node bench/long-task.bench.mjs   (after a build; BENCH_LONG_TASK_MOVES default 1,350, a checkpoint
//                                    every BENCH_LONG_TASK_EVERY moves, default 450; sample 25)
// With BENCH_LONG_TASK_REVIEW=1 the review step is a review loop's: its on_enter holds a marker
// (ensure_participant_seat), its on_exit records an exit (set_session_mode), and a person records a
// decision at each arrival, so the (task, review) stream grows with every round too.
// With BENCH_CPU_PROF=<dir> the workflow engine writes a --cpu-prof profile there when it stops.
import { resolve } from 'node:path';
import pg from 'pg';
import { createTask, importWorkflow, moveTask, recordDecision } from '@gantry/contracts';
import { databaseUrl, registerBenchProduct, startWorkflowServices } from './lib.mjs';

const moves = Number(process.env.BENCH_LONG_TASK_MOVES ?? 1350);
const every = Number(process.env.BENCH_LONG_TASK_EVERY ?? 450);
const sample = Number(process.env.BENCH_LONG_TASK_SAMPLE ?? 25);
const review = process.env.BENCH_LONG_TASK_REVIEW === '1';
const reviewStep = review
  ? `    on_enter:
      - type: ensure_participant_seat
        config: { role: reviewer, agent_profile_id: bench-reviewer, decision_required: true }
    on_exit:
      - type: set_session_mode
        config: { mode: acceptEdits }
`
  : '';

const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

const engineNodeArgs = process.env.BENCH_CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${resolve(process.env.BENCH_CPU_PROF)}`] : [];
const services = await startWorkflowServices('long_task', { engineNodeArgs });
const { engineSchema, engine, client } = services;
const engineDb = new pg.Client({ connectionString: databaseUrl, options: `-c search_path=${engineSchema}` });
await engineDb.connect();
try {
  await registerBenchProduct(client, { repository: 'bench/long-task', cloneUrl: '/srv/git/long-task.git' });
  await client.request(importWorkflow, {
    workflowId: 'long',
    idempotencyKey: 'bench/import:1',
    yaml: `name: Long task
steps:
  - id: work
    name: Work
  - id: review
    name: Review
${reviewStep}`,
  });
  await client.request(createTask, { taskId: 'T-long', productId: 'bench', title: 'long task', workflowId: 'long', idempotencyKey: 'bench/task:1' });
  const streamLength = async (id) => (await engineDb.query(`SELECT count(*)::int AS n FROM events WHERE stream_id = $1`, [id])).rows[0].n;
  const cpuOf = async () => {
    const stat = await import('node:fs/promises').then((fs) => fs.readFile(`/proc/${engine.process.pid}/stat`, 'utf8'));
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) * 10; // utime + stime, ms (100 ticks a second)
  };
  const latencies = [];
  let cpuFrom = await cpuOf();
  let sinceCheckpoint = 0;
  console.log(`moves of one task between two steps, median of the last ${sample} moves before each checkpoint:`);
  for (let i = 1; i <= moves; i++) {
    const t0 = performance.now();
    await client.request(moveTask, { taskId: 'T-long', toStepId: i % 2 === 1 ? 'review' : 'work', idempotencyKey: `bench/move:${i}` });
    latencies.push(performance.now() - t0);
    if (review && i % 2 === 1) {
      await client.request(recordDecision, { taskId: 'T-long', stepId: 'review', verdict: 'approve', actor: 'bench', idempotencyKey: `bench/decision:${i}` });
    }
    sinceCheckpoint++;
    if (i === sample || i % every === 0) {
      const cpu = await cpuOf();
      console.log(
        `  ${String(await streamLength('task-T-long')).padStart(5)} events${review ? ` (review pair: ${await streamLength('taskstep-T-long~long~review')})` : ''}: ${median(latencies.slice(-sample)).toFixed(1)} ms a move (median), engine CPU ${((cpu - cpuFrom) / sinceCheckpoint).toFixed(1)} ms a move`,
      );
      cpuFrom = cpu;
      sinceCheckpoint = 0;
    }
  }
} finally {
  await engineDb.end();
  await services.close();
}
