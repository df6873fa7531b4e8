// The reviewer fan-out of the workflow engine: one step entry whose on_enter queues a REVIEW run for
// each of its 200 participants, measured from the move that makes the entry until the 200th REVIEW
// job is queued in the job service; median of 5 entries (each a new entry of the same task into the
// step). The job service and the workflow engine run as their own processes on throw-away schemas.
//   client:  move_task sent → the 200th JobEnqueued of the entry received on NATS
//   server:  the admission committed (TaskAdmittedToStep) → the 200th JobEnqueued committed (PostgreSQL clock)
//   BENCH_FANOUT_PARTICIPANTS (default 200), BENCH_FANOUT_ROUNDS (default 5)
import pg from 'pg';
import { createTask, importWorkflow, listStepEntries, moveTask, registerAgentProfile } from '@gantry/contracts';
import { readAllPages } from '@gantry/messaging';
import { databaseUrl, registerBenchProduct, startWorkflowServices } from './lib.mjs';

const participants = Number(process.env.BENCH_FANOUT_PARTICIPANTS ?? 200);
const rounds = Number(process.env.BENCH_FANOUT_ROUNDS ?? 5);

const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

const services = await startWorkflowServices('fanout');
const { naming, jobsSchema, engineSchema, bus, client } = services;
const jobsDb = new pg.Client({ connectionString: databaseUrl, options: `-c search_path=${jobsSchema}` });
const engineDb = new pg.Client({ connectionString: databaseUrl, options: `-c search_path=${engineSchema}` });
await jobsDb.connect();
await engineDb.connect();
try {
  await registerBenchProduct(client, { repository: 'bench/fanout', cloneUrl: '/srv/git/fanout.git' });
  const seats = [];
  for (let i = 0; i < participants; i++) {
    const id = `p-${String(i).padStart(3, '0')}`;
    await client.request(registerAgentProfile, { agentProfileId: id, model: 'claude-opus-4-7', thinkingBudget: 12000, idempotencyKey: `bench/profile:${id}` });
    seats.push(`      - { id: ${id}, role: reviewer, agent_profile_id: ${id}, decision_required: true, position: ${i} }`);
  }
  await client.request(importWorkflow, {
    workflowId: 'fanout',
    idempotencyKey: 'bench/import:1',
    yaml: `name: Fan-out
steps:
  - id: work
    name: Work
  - id: review
    name: Review
    participants:
${seats.join('\n')}
    on_enter:
      - type: clear_decisions
      - type: queue_run_for_each_participant
        config: { role: reviewer, reason: review_started }
`,
  });
  await client.request(createTask, { taskId: 'T-bench', productId: 'bench', title: 'fan-out', workflowId: 'fanout', idempotencyKey: 'bench/task:1' });

  // Every REVIEW job queued for the task, as the job service's relay publishes it.
  let arrived = 0;
  let onArrival = () => undefined;
  const subscription = bus.nc.subscribe(`${naming.subjectRoot}.jobs.evt.JobEnqueued.>`);
  void (async () => {
    for await (const msg of subscription) {
      const event = msg.json();
      if (event.data.taskId === 'T-bench' && event.data.kind === 'REVIEW') {
        arrived++;
        onArrival();
      }
    }
  })();

  const client_ms = [];
  const server_ms = [];
  for (let round = 1; round <= rounds; round++) {
    const expected = round * participants;
    const done = new Promise((resolve) => {
      onArrival = () => arrived >= expected && resolve(performance.now());
    });
    const t0 = performance.now();
    await client.request(moveTask, { taskId: 'T-bench', toStepId: 'review', idempotencyKey: `bench/move:review-${round}` });
    const t1 = await done;
    client_ms.push(t1 - t0);
    const admitted = await engineDb.query(
      `SELECT recorded_at FROM events WHERE stream_id = 'task-T-bench' AND type = 'TaskAdmittedToStep' AND data->>'stepId' = 'review' AND (data->>'entrySeq')::int = $1`,
      [round],
    );
    const last = await jobsDb.query(`SELECT max(recorded_at) AS at FROM (SELECT recorded_at FROM events WHERE type = 'JobEnqueued' AND data->>'taskId' = 'T-bench' AND data->>'kind' = 'REVIEW' ORDER BY position LIMIT $1) AS round`, [expected]);
    server_ms.push(last.rows[0].at.getTime() - admitted.rows[0].recorded_at.getTime());
    // the entry finishes (its marker written), then the task leaves for the next round
    for (;;) {
      const entries = await readAllPages((cursor) => client.request(listStepEntries, { taskId: 'T-bench', stepId: 'review', ...(cursor ? { cursor } : {}) }), (page) => page.entries);
      if (entries.find((e) => e.entrySeq === round)?.terminal) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    await client.request(moveTask, { taskId: 'T-bench', toStepId: 'work', idempotencyKey: `bench/move:work-${round}` });
    console.log(`entry ${round}: ${participants} REVIEW jobs queued in ${client_ms.at(-1).toFixed(0)} ms (client), ${server_ms.at(-1).toFixed(0)} ms (server)`);
  }
  subscription.unsubscribe();
  console.log(`fan-out of ${participants} participants, median of ${rounds} entries: ${median(client_ms).toFixed(0)} ms from move_task to the ${participants}th REVIEW job queued (client), ${median(server_ms).toFixed(0)} ms from the admission's commit to the ${participants}th enqueue's commit (server)`);
} finally {
  await jobsDb.end();
  await engineDb.end();
  await services.close();
}
