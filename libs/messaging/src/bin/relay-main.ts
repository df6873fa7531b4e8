/**
 * A relay on its own: publishes a schema's outbox to its context's stream until SIGTERM.
 * Services run the relay in-process; this entry exists for operations (draining a backlog while a
 * service is down) and for the crash tests that SIGKILL a relay mid-batch.
 */
import { z } from 'zod';
import { Contexts } from '@gantry/contracts';
import { createPool } from '@gantry/eventstore';
import { Bus } from '../lib/bus.js';
import { OutboxRelay } from '../lib/relay.js';

const env = (name: string, fallback?: string): string => {
  const value = process.env[name] ?? fallback;
  if (value === undefined) throw new Error(`${name} is required`);
  return value;
};

const databaseUrl = env('GANTRY_DATABASE_URL', 'postgres://postgres@127.0.0.1:5432/gantry');
const schema = env('GANTRY_DB_SCHEMA');
const context = z.enum(Contexts).parse(env('GANTRY_CONTEXT'));
const naming = { subjectRoot: env('GANTRY_SUBJECT_ROOT', 'gantry'), streamPrefix: env('GANTRY_STREAM_PREFIX', 'GANTRY_') };
const line = (level: string) => (message: string, fields: Record<string, unknown>) =>
  process.stdout.write(JSON.stringify({ level, time: new Date().toISOString(), service: 'relay', message, ...fields }) + '\n');

const pool = createPool({ url: databaseUrl, schema, max: 2 });
const bus = await Bus.connect({ servers: env('GANTRY_NATS_URL', 'nats://127.0.0.1:4222'), naming, name: `relay-${schema}` });
await bus.ensureEventStream(context);
const relay = new OutboxRelay({
  databaseUrl,
  pool,
  schema,
  bus,
  context,
  logger: { log: line('log'), error: line('error') },
  batchSize: Number(env('GANTRY_RELAY_BATCH', '500')),
});
relay.start();
const stop = async () => {
  await relay.stop();
  await bus.close();
  await pool.end();
};
const exitWhenStopped = () => {
  stop().then(
    () => process.exit(0),
    (error: unknown) => {
      line('error')('relay did not stop cleanly', { error: String(error) });
      process.exit(1);
    },
  );
};
process.once('SIGTERM', exitWhenStopped);
process.once('SIGINT', exitWhenStopped);
