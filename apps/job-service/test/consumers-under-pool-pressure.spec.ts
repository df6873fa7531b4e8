import type { INestApplication } from '@nestjs/common';
import type pg from 'pg';
import { cancelSprintRun, commandSubject, createSprintRun, listJobs, returnTasksToTodo } from '@gantry/contracts';
import { EventStore } from '@gantry/eventstore';
import { eventually } from '@gantry/testing';
import { createWorld, key, registerProducts, startInProcess, type TestWorld } from './harness.js';

/*
 * A durable consumer's handler runs inside the transaction that records the event in the inbox. A
 * handler that opened a second transaction from the same pool while holding that one would wait for
 * a connection that only its own kind can free: with every connection but one busy, it waits for
 * ever. The service's pool here has exactly one connection left for the whole service.
 */
describe('durable consumers with one connection of the pool left', () => {
  let world: TestWorld;
  let app: INestApplication;
  const held: pg.PoolClient[] = [];

  beforeAll(async () => {
    world = await createWorld('pool-pressure');
    // The workflow engine's side of return_tasks_to_todo, which a cancelled run's effects also ask for.
    world.bus.nc.subscribe(commandSubject(world.naming, 'workflow', returnTasksToTodo.name), {
      callback: (_error, msg) => {
        const request = JSON.parse(new TextDecoder().decode(msg.data)) as { taskIds: string[] };
        msg.respond(JSON.stringify({ ok: true, result: { returned: [], unknownTaskIds: request.taskIds } }));
      },
    });
    app = await startInProcess(world);
    await registerProducts(world.client, ['product-pool'], { repository: 'acme/pool', prStrategy: 'SPRINT' });
    const pool = app.get(EventStore).pool;
    for (let i = 1; i < pool.options.max; i++) held.push(await pool.connect());
  });

  afterAll(async () => {
    for (const client of held) client.release();
    await app?.close();
    await world?.close();
  });

  const sprintJobs = async (sprintRunId: string) => (await world.client.request(listJobs, { sprintRunId })).jobs;

  it("a sprint run's effects enqueue and then cancel its jobs inside the consumer's transaction", async () => {
    const created = await world.client.request(createSprintRun, {
      sprintId: 'SP-P', productId: 'product-pool', taskIds: ['T-1', 'T-2', 'T-3'], branch: 'sprint/SP-P', idempotencyKey: key('sprint'),
    });
    // The run queues its tasks one after the other: only T-1's job before T-1 is done.
    await eventually(async () => (await sprintJobs(created.sprintRunId)).length === 1, { what: "the first task's job", timeoutMs: 30_000 });

    await world.client.request(cancelSprintRun, { sprintRunId: created.sprintRunId, reason: 'scope changed', idempotencyKey: key('cancel') });
    const jobs = await eventually(async () => {
      const j = await sprintJobs(created.sprintRunId);
      return j.every((x) => x.status === 'CANCELLED') ? j : null;
    }, { what: 'every sprint job cancelled', timeoutMs: 30_000 });
    expect(jobs.map((j) => j.taskId)).toEqual(['T-1']);
  });
});
