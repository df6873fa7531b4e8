// Append throughput of the event log: sequential and with 8 concurrent writers, with and without
// an idempotency receipt (a command as the services run it: receipt + events + outbox in one commit).
import { randomUUID } from 'node:crypto';
import { createPool, EventStore, migrate } from '@gantry/eventstore';
import { benchName, databaseUrl, dropSchema, measure } from './lib.mjs';

const schema = benchName('append');
await migrate({ url: databaseUrl, schema });
const pool = createPool({ url: databaseUrl, schema, max: 16 });
const store = new EventStore({ pool, schema });
const grouped = new EventStore({ pool, schema, groupCommit: { maxGroups: 4, maxBatch: 32 } });
const total = Number(process.env.BENCH_APPENDS ?? 2000);
const meta = { correlationId: 'bench' };

const plain = () => store.append(`s-${randomUUID()}`, 0, [{ type: 'Happened', data: { at: Date.now() } }], meta);
const commandOn = (target) => () => {
  const key = randomUUID();
  return target.execute({ metadata: meta, idempotency: { scope: 'bench', key, request: { key } } }, (uow) =>
    uow.append(`s-${key}`, 0, [{ type: 'Happened', data: { key } }]),
  );
};

try {
  const runs = [
    ['append', plain, [1, 8]],
    ['command (receipt + append)', commandOn(store), [1, 8, 32]],
    ['command, group commit', commandOn(grouped), [1, 8, 32]],
  ];
  for (const [label, op, writerCounts] of runs) {
    for (const writers of writerCounts) {
      const r = await measure(total, writers, op);
      console.log(`${label.padEnd(28)} writers=${writers}  ${String(r.perSecond).padStart(5)}/s  p50=${r.p50}ms p99=${r.p99}ms (n=${r.n})`);
    }
  }
} finally {
  await pool.end();
  await dropSchema(schema);
}
