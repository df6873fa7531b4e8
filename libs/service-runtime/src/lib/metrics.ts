import { Controller, Get, Header } from '@nestjs/common';
import pTimeout from 'p-timeout';
import { collectDefaultMetrics, Counter, Gauge, Histogram, register } from 'prom-client';
import type { WrittenBatch } from '@gantry/eventstore';
import type { ConsumerLag } from '@gantry/messaging';
import { CHECK_TIMEOUT_MS } from './readiness.js';

/**
 * The service's metrics in Prometheus' text format, from prom-client's default registry: the
 * process's own (CPU, memory, event-loop lag, garbage collection; prom-client's default metrics)
 * and Gantry's below. docs/operations.md, "Metrics", says what each one tells.
 */

/** Seconds: from a millisecond to ten seconds, with 20 ms (the claim's aim under load) a bound. */
const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/** The name the transport uses for a command it does not serve: one series, whatever was asked for. */
export const UNKNOWN_COMMAND = '(unknown)';

/**
 * A metric of this process: the one registered under its name, or this one, registered now. A process
 * that runs several services (the tests) shares one registry; each metric is made once.
 */
function once<M>(name: string, make: () => M): M {
  return (register.getSingleMetric(name) as M | undefined) ?? make();
}

const commandDuration = once(
  'gantry_command_duration_seconds',
  () =>
    new Histogram({
      name: 'gantry_command_duration_seconds',
      help: 'Time from a command reaching the service (NATS or HTTP) to its reply, by command and outcome (ok, or the error code)',
      labelNames: ['command', 'outcome'] as const,
      buckets: LATENCY_BUCKETS,
    }),
);

const batchDuration = once(
  'gantry_write_batch_duration_seconds',
  () =>
    new Histogram({
      name: 'gantry_write_batch_duration_seconds',
      help: 'Time the commands of one write message waited for PostgreSQL to commit it',
      buckets: LATENCY_BUCKETS,
    }),
);

const batchCommands = once(
  'gantry_write_batch_commands',
  () =>
    new Histogram({
      name: 'gantry_write_batch_commands',
      help: 'Commands written together in one message (one transaction, one commit)',
      buckets: [1, 2, 4, 8, 16, 32, 64],
    }),
);

/** A metric's series for these label values, made once: prom-client hashes the labels on every `labels` call. */
function seriesOf<S>(made: Map<string, S>, values: readonly string[], make: () => S): S {
  const key = values.join('\u0000');
  let series = made.get(key);
  if (!series) made.set(key, (series = make()));
  return series;
}

const commandSeries = new Map<string, Histogram.Internal<'command' | 'outcome'>>();

/** Records one command answered: `command` qualified (`jobs.claim_job`), `outcome` `ok` or the error's code. */
export function observeCommand(command: string, outcome: string, seconds: number): void {
  seriesOf(commandSeries, [command, outcome], () => commandDuration.labels(command, outcome)).observe(seconds);
}

const settlements = once(
  'gantry_consumer_settlements_total',
  () =>
    new Counter({
      name: 'gantry_consumer_settlements_total',
      help: 'Messages a durable consumer settled: ack (handled, a duplicate, or nothing to do), nak (handed back to come again), term (given up: dead-lettered)',
      labelNames: ['consumer', 'settlement'] as const,
    }),
);

const settlementSeries = new Map<string, Counter.Internal>();

/** Records one message a durable consumer settled (EventConsumerOptions.onSettled). */
export function observeSettlement(consumer: string, settlement: string): void {
  seriesOf(settlementSeries, [consumer, settlement], () => settlements.labels(consumer, settlement)).inc();
}

const outages = once(
  'gantry_consumer_outage_handbacks_total',
  () =>
    new Counter({
      name: 'gantry_consumer_outage_handbacks_total',
      help: 'Deliveries a durable consumer handed back for an outage, not counted towards its dead letters, by what was out of reach: consumer (its own database), database (one its handler uses), service (another service its handler asked)',
      labelNames: ['consumer', 'out_of_reach'] as const,
    }),
);

const outageSeries = new Map<string, Counter.Internal>();

/** Records one delivery a durable consumer handed back for an outage (EventConsumerOptions.onOutage). */
export function observeOutageHandBack(consumer: string, outOfReach: string): void {
  seriesOf(outageSeries, [consumer, outOfReach], () => outages.labels(consumer, outOfReach)).inc();
}

const claimsLeftToExpire = once(
  'gantry_runner_claims_left_to_expire_total',
  () =>
    new Counter({
      name: 'gantry_runner_claims_left_to_expire_total',
      help: 'Claims a runner stopped working on and could not give back (the job service never answered the hand-back): each ends when its lease runs out',
    }),
);

/** Records one claim a runner left to its lease's end: its hand-back was asked again and never answered. */
export function countClaimLeftToExpire(): void {
  claimsLeftToExpire.inc();
}

const leaseSweepFailures = once(
  'gantry_lease_sweep_failures_total',
  () =>
    new Counter({
      name: 'gantry_lease_sweep_failures_total',
      help: 'Tries of a lease sweep on a lease (or worktree key) it could not handle and went on past, by sweep: each pass tries them again',
      labelNames: ['sweep'] as const,
    }),
);

/** Records one lease or key a sweep's pass could not handle and went on past (`sweep`: `job-lease`, `worktree-lease`). */
export function countLeaseSweepFailure(sweep: 'job-lease' | 'worktree-lease'): void {
  leaseSweepFailures.labels(sweep).inc();
}

const leaseSweepFaulty = once(
  'gantry_lease_sweep_faulty_leases',
  () =>
    new Gauge({
      name: 'gantry_lease_sweep_faulty_leases',
      help: 'Leases (or worktree keys) a lease sweep failed on at its last try and tries again, by sweep: above 0 for long wants a look',
      labelNames: ['sweep'] as const,
    }),
);

/** One more (`+1`) or one fewer (`-1`) lease or key a sweep keeps failing on (RecurringFaults). */
export function standingLeaseSweepFaults(sweep: 'job-lease' | 'worktree-lease', change: 1 | -1): void {
  leaseSweepFaulty.labels(sweep).inc(change);
}

/** Records one write message of the event store (EventStore.onBatchWritten). */
export function observeWriteBatch(batch: WrittenBatch): void {
  batchDuration.observe(batch.seconds);
  batchCommands.observe(batch.commands);
}

/**
 * What a running service reports when Prometheus scrapes it (read then, nothing kept in between): its
 * relay's backlog, its durable consumers' lag, its dead letters.
 */
export interface ScrapedState {
  relayBacklog(): Promise<{ pending: number; oldestAgeMs: number }>;
  /** Events this process's relay has published (and JetStream acknowledged) since it started. */
  relayPublished(): number;
  /** The service's connection pool: its size limit, the connections open and idle, the checkouts waiting for one. */
  databasePool(): { max: number; open: number; idle: number; waiting: number };
  consumers(): ReadonlyArray<{ name: string; lag(): Promise<ConsumerLag> }>;
  /** Dead letters kept, by consumer. */
  deadLetters(): Promise<Map<string, number>>;
}

/** The services of this process (one, but in tests): each scrape reads all of them. */
const services = new Set<ScrapedState>();

/** Adds a service's state to what /metrics reports; returns the call that takes it out (at shutdown). */
export function reportOnScrape(service: ScrapedState): () => void {
  services.add(service);
  return () => services.delete(service);
}

/** Counts the scrapes of /metrics (see perScrape). */
let scrapes = 0;

/** `read` once per scrape: the metrics that share a reading (the relay's two, the consumers' three) share it. */
function perScrape<T>(read: () => Promise<T>): () => Promise<T> {
  let readAt = -1;
  let reading: Promise<T> | undefined;
  return () => {
    if (!reading || readAt !== scrapes) {
      readAt = scrapes;
      reading = read();
    }
    return reading;
  };
}

/**
 * A scrape waits for a reading of the database or of NATS as long as /ready waits for a check
 * (CHECK_TIMEOUT_MS). Such a reading waits for a connection like any command, and when every
 * connection is held (a rebuild holding the log, a stuck transaction) it would hold the scrape past
 * Prometheus' timeout, and the pool's own figures, which say why, would be lost with it.
 */
const SCRAPE_READ_TIMEOUT_MS = CHECK_TIMEOUT_MS;

/** The readings still unanswered, by what asks and what is asked (see `answered`). */
const unanswered = new WeakMap<object, Map<string, Promise<unknown>>>();

/**
 * `read` (`what` of `owner`), or null when it fails or does not answer within SCRAPE_READ_TIMEOUT_MS:
 * the figures it feeds are left out of this scrape rather than failing or holding it. A reading
 * still unanswered from an earlier scrape is waited for again rather than asked twice, so scrapes
 * of a stuck service do not pile up reads behind its commands.
 */
function answered<T>(owner: object, what: string, read: () => Promise<T>): Promise<T | null> {
  let pending = unanswered.get(owner);
  if (!pending) unanswered.set(owner, (pending = new Map()));
  let reading = pending.get(what) as Promise<T> | undefined;
  if (!reading) {
    const asked = pending;
    reading = read().finally(() => asked.delete(what));
    asked.set(what, reading);
  }
  return pTimeout(
    reading.catch(() => null),
    { milliseconds: SCRAPE_READ_TIMEOUT_MS, fallback: () => null },
  );
}

// A service that cannot answer (its database is away, or all its connections are held) is left out
// of the scrape rather than failing it; gantry_scrape_readings_left_out counts what was.
const relayBacklogs = perScrape(() => Promise.all([...services].map((s) => answered(s, 'relay backlog', () => s.relayBacklog()))));
const consumerLags = perScrape(async () =>
  (
    await Promise.all(
      [...services].map((s) => Promise.all(s.consumers().map(async (c) => ({ name: c.name, lag: await answered(c, 'lag', () => c.lag()) })))),
    )
  ).flat(),
);
const deadLetterCounts = perScrape(() => Promise.all([...services].map((s) => answered(s, 'dead letters', () => s.deadLetters()))));

/** A gauge read when Prometheus scrapes, made once (see `once`). */
function scrapedGauge<L extends string = never>(name: string, help: string, collect: (gauge: Gauge<L>) => void | Promise<void>, labelNames: readonly L[] = []): void {
  once(
    name,
    () =>
      new Gauge<L>({
        name,
        help,
        labelNames,
        collect() {
          return collect(this);
        },
      }),
  );
}

/**
 * A gauge summed over the services of this process, from their connection pools. Registered before
 * the metrics that read the database, so that a scrape reads the pools before its own reads use them.
 */
function poolGauge(name: string, help: string, value: (pool: ReturnType<ScrapedState['databasePool']>) => number): void {
  scrapedGauge(name, help, (gauge) => gauge.set([...services].reduce((sum, s) => sum + value(s.databasePool()), 0)));
}

poolGauge('gantry_db_pool_max', 'Connections the service may open to PostgreSQL (GANTRY_DB_POOL_MAX; its relay has one of its own)', (p) => p.max);
poolGauge('gantry_db_pool_busy', 'Connections checked out: a command, a consumer or a read using them', (p) => p.open - p.idle);
poolGauge('gantry_db_pool_waiting', 'Work waiting for a connection because all of them are busy: above 0 for long, the pool is too small', (p) => p.waiting);

scrapedGauge('gantry_relay_backlog_events', 'Committed events not yet published to JetStream (the outbox)', async (gauge) =>
  gauge.set(over(await relayBacklogs(), (backlogs) => backlogs.reduce((sum, b) => sum + b.pending, 0))),
);

scrapedGauge('gantry_relay_backlog_oldest_age_seconds', 'Age of the oldest committed event not yet published to JetStream; 0 when there is none', async (gauge) =>
  gauge.set(over(await relayBacklogs(), (backlogs) => Math.max(0, ...backlogs.map((b) => b.oldestAgeMs)) / 1000)),
);

once(
  'gantry_relay_published_events_total',
  () =>
    new Counter({
      name: 'gantry_relay_published_events_total',
      help: 'Events this process published to JetStream (acknowledged) since it started; only the active relay of a schema publishes',
      collect() {
        this.reset();
        this.inc([...services].reduce((sum, s) => sum + s.relayPublished(), 0));
      },
    }),
);

/** One gauge per consumer, from its lag (`/ready`'s `consumers` check reads the same). */
function consumerGauge(name: string, help: string, value: (lag: ConsumerLag) => number): void {
  scrapedGauge(
    name,
    help,
    async (gauge) => {
      gauge.reset();
      for (const { name: consumer, lag } of await consumerLags()) if (lag) gauge.set({ consumer }, value(lag));
    },
    ['consumer'],
  );
}

consumerGauge('gantry_consumer_attached', '1 while the durable consumer is attached to its durable on the server, else 0', (lag) => (lag.attached ? 1 : 0));
consumerGauge('gantry_consumer_pending_events', 'Events waiting for this process: not yet delivered, or delivered here and not finished', (lag) => lag.pending);
consumerGauge('gantry_consumer_lag_seconds', 'Age (time in the stream) of the oldest event waiting for this process; 0 when caught up', (lag) => lag.oldestUnprocessedAgeMs / 1000);

scrapedGauge(
  'gantry_dead_letters',
  'Events a consumer gave up on, kept in the dead_letters table until replayed, discarded or pruned',
  async (gauge) => {
    gauge.reset();
    for (const counts of present(await deadLetterCounts())) for (const [consumer, count] of counts) gauge.set({ consumer }, count);
  },
  ['consumer'],
);

// Last: it waits for the readings above, which this scrape has asked for by now.
scrapedGauge(
  'gantry_scrape_readings_left_out',
  `Readings of the database or NATS this scrape left out because they failed or took over ${SCRAPE_READ_TIMEOUT_MS / 1000} s (a relay's backlog, a consumer's lag, the dead letters): their figures are missing from it`,
  async (gauge) => {
    const [backlogs, lags, deadLetters] = await Promise.all([relayBacklogs(), consumerLags(), deadLetterCounts()]);
    gauge.set([...backlogs, ...lags.map((c) => c.lag), ...deadLetters].filter((r) => r === null).length);
  },
);

function present<T>(readings: ReadonlyArray<T | null>): T[] {
  return readings.filter((r): r is T => r !== null);
}

/** A figure over the services that answered; NaN (Prometheus' "unknown") when none of them did. */
function over<T>(readings: ReadonlyArray<T | null>, figure: (answered: T[]) => number): number {
  const answered = present(readings);
  return readings.length > 0 && answered.length === 0 ? NaN : figure(answered);
}

/** prom-client's default metrics, once per process. */
export function collectProcessMetrics(): void {
  if (register.getSingleMetric('process_cpu_seconds_total')) return;
  collectDefaultMetrics();
}

/** GET /metrics: every metric of the process, in Prometheus' text format (no token: it holds no secrets, like /health). */
@Controller()
export class MetricsController {
  constructor() {
    collectProcessMetrics();
  }

  @Get('metrics')
  @Header('Content-Type', register.contentType)
  metrics(): Promise<string> {
    scrapes++;
    return register.metrics();
  }
}
