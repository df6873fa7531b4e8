import { Controller, Get, Header } from '@nestjs/common';
import { collectDefaultMetrics, Histogram, register } from 'prom-client';
import type { WrittenBatch } from '@gantry/eventstore';

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

/** A command's histogram series, made once per command and outcome (prom-client hashes the labels on every `labels` call). */
const commandSeries = new Map<string, Histogram.Internal<'command' | 'outcome'>>();

/** Records one command answered: `command` qualified (`jobs.claim_job`), `outcome` `ok` or the error's code. */
export function observeCommand(command: string, outcome: string, seconds: number): void {
  const key = `${command}\u0000${outcome}`;
  let series = commandSeries.get(key);
  if (!series) commandSeries.set(key, (series = commandDuration.labels(command, outcome)));
  series.observe(seconds);
}

/** Records one write message of the event store (EventStore.onBatchWritten). */
export function observeWriteBatch(batch: WrittenBatch): void {
  batchDuration.observe(batch.seconds);
  batchCommands.observe(batch.commands);
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
    return register.metrics();
  }
}
