/**
 * A relay on its own: publishes a schema's outbox to its context's stream until SIGTERM.
 * Services run the relay in-process; this entry exists for operations (draining a backlog while a
 * service is down) and for the crash tests that SIGKILL a relay mid-batch.
 */
import { z } from 'zod';
import { Contexts, namingRules } from '@gantry/contracts';
import { createPool, isSchemaName, SCHEMA_NAME_RULE } from '@gantry/eventstore';
import { Bus } from '../lib/bus.js';
import { OutboxRelay } from '../lib/relay.js';

/** The longest a Node timer waits (2^31 - 1 ms); a longer bound would fire at once. */
const MAX_TIMER_MS = 2_147_483_647;

/** The relay's settings, checked at start: a bad value stops it with the variables named (never their values). */
const Settings = z.object({
  GANTRY_DATABASE_URL: z.string().min(1).default('postgres://postgres@127.0.0.1:5432/gantry'),
  // The names the services check among their settings, by the same rules (docs/configuration.md).
  GANTRY_DB_SCHEMA: z.string().refine(isSchemaName, SCHEMA_NAME_RULE),
  GANTRY_CONTEXT: z.enum(Contexts),
  GANTRY_SUBJECT_ROOT: z.string().default('gantry').refine(namingRules.subjectRoot.valid, namingRules.subjectRoot.rule),
  GANTRY_STREAM_PREFIX: z.string().default('GANTRY_').refine(namingRules.streamPrefix.valid, namingRules.streamPrefix.rule),
  GANTRY_NATS_URL: z.string().min(1).default('nats://127.0.0.1:4222'),
  GANTRY_RELAY_BATCH: z.coerce.number().int().positive().max(10_000).default(500),
  // The services' bounds on waiting for a PostgreSQL that stops answering, with their ranges and
  // defaults (docs/configuration.md, "Waiting for PostgreSQL").
  GANTRY_DB_CONNECT_TIMEOUT_MS: z.coerce.number().int().min(100).max(600_000).default(5_000),
  GANTRY_DB_QUERY_TIMEOUT_MS: z.coerce.number().int().min(100).max(MAX_TIMER_MS).default(8_000),
  GANTRY_DB_KEEPALIVE_MS: z.coerce.number().int().min(1_000).max(3_600_000).default(10_000),
  GANTRY_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS: z.coerce.number().int().min(0).max(MAX_TIMER_MS).default(600_000),
});
const parsed = Settings.safeParse(process.env);
if (!parsed.success) {
  const refused = parsed.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`).join('; ');
  process.stderr.write(`relay refused its settings: ${refused}\n`);
  process.exit(1);
}
const settings = parsed.data;
const databaseUrl = settings.GANTRY_DATABASE_URL;
const schema = settings.GANTRY_DB_SCHEMA;
const context = settings.GANTRY_CONTEXT;
const naming = { subjectRoot: settings.GANTRY_SUBJECT_ROOT, streamPrefix: settings.GANTRY_STREAM_PREFIX };
const line = (level: string) => (message: string, fields: Record<string, unknown>) =>
  process.stdout.write(JSON.stringify({ level, time: new Date().toISOString(), service: 'relay', message, ...fields }) + '\n');

const timeouts = {
  connectMs: settings.GANTRY_DB_CONNECT_TIMEOUT_MS,
  queryMs: settings.GANTRY_DB_QUERY_TIMEOUT_MS,
  keepAliveMs: settings.GANTRY_DB_KEEPALIVE_MS,
  idleInTransactionMs: settings.GANTRY_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS,
};

const pool = createPool({ url: databaseUrl, schema, max: 2, timeouts });
const bus = await Bus.connect({ servers: settings.GANTRY_NATS_URL, naming, name: `relay-${schema}` });
await bus.ensureEventStream(context);
const relay = new OutboxRelay({
  databaseUrl,
  pool,
  schema,
  bus,
  context,
  logger: { log: line('log'), error: line('error') },
  batchSize: settings.GANTRY_RELAY_BATCH,
  timeouts,
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
