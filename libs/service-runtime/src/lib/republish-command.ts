import { parseArgs } from 'node:util';
import type pg from 'pg';
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { secretScrubber, secretValuesIn, streamName, type Context, type SecretScrubber } from '@gantry/contracts';
import {
  assertSchemaName,
  countRepublishable,
  createPool,
  putBackInOutbox,
  recordedRuns,
  runsStillHeld,
  type RepublishResult,
  type RepublishWindow,
  type StreamMark,
} from '@gantry/eventstore';
import { isNotFound } from '@gantry/messaging';
import { redactUrl, serviceSettings, type ServiceConfig } from './config.js';
import { SettingsError, settingsOf } from './settings.js';

/**
 * `node apps/<service>/dist/main.js republish --since <time>`: puts the events of a window of the
 * service's log back in its outbox, for its relay to publish them again under their own event ids,
 * after a JetStream stream lost them (docs/operations.md, "JetStream state lost"). It reads the
 * service's own configuration (its database, schema, NATS and receipt window), asks JetStream for its
 * event stream's max age (a guard rail of the window), and publishes nothing itself: the running
 * service's relay publishes what it puts back.
 */

export const REPUBLISH_USAGE = `usage: node apps/<service>/dist/main.js republish --since <time> [--until <time>] [--dry-run] [--force] [--batch-size <n>]

Puts the service's events that occurred from --since (inclusive) to --until (exclusive; default: up to
the last event) back in its outbox: its running relay publishes them again under their event ids, and
each consumer's inbox drops those it had handled (docs/operations.md, "JetStream state lost").

  --since <time>      ISO 8601 with a time zone, e.g. 2026-12-05T21:00:00Z; not in the future, and not
                      older than the event stream's max age (JetStream's, or GANTRY_STREAM_MAX_AGE_MS
                      when the stream is gone) or the receipt window (GANTRY_RECEIPT_TTL_MS) without --force
  --until <time>      the end of the window (exclusive), after --since
  --dry-run           print how many events would be put back, per stream type and event type; change nothing
  --force             accept a --since older than the stream's max age or the receipt window (consumers may
                      handle those events, or send their commands, twice), or go on when JetStream cannot be
                      asked for the max age
  --batch-size <n>    events put back per transaction (default 1000, at most 100000)`;

/** Arguments the command refuses, or a refusal of its guard rails: nothing was changed. Exit 2. */
export class RepublishRefused extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'RepublishRefused';
  }
}

export interface RepublishRequest {
  window: RepublishWindow;
  dryRun: boolean;
  force: boolean;
  batchSize: number;
}

/** A time with its date, its time of day and its zone: a time without a zone would be read in the machine's. */
const ISO_TIME = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::\d{2}(?:\.\d{1,9})?)?(?:Z|([+-])(\d{2}):(\d{2}))$/i;
const MAX_BATCH_SIZE = 100_000;

function timeOf(option: string, value: string): Date {
  const parts = ISO_TIME.exec(value);
  const time = parts ? new Date(value) : null;
  if (parts === null || time === null || Number.isNaN(time.getTime())) {
    throw new RepublishRefused(`${option} must be an ISO 8601 time with a time zone, e.g. 2026-12-05T21:00:00Z (was '${value}')`);
  }
  // Date rolls a day or an hour past the end over into the next (2026-02-30 is read as 2026-03-02,
  // 24:00 as the next day's midnight): the time read, in the zone written, must have the date and
  // the hour and minute written, or the window would not be the one asked for.
  const [, year, month, day, hour, minute, sign, zoneHours, zoneMinutes] = parts;
  const offsetMs = sign === undefined ? 0 : (sign === '-' ? -1 : 1) * (Number(zoneHours) * 60 + Number(zoneMinutes)) * 60_000;
  const local = new Date(time.getTime() + offsetMs);
  const read = [local.getUTCFullYear(), local.getUTCMonth() + 1, local.getUTCDate(), local.getUTCHours(), local.getUTCMinutes()];
  if (read.some((n, i) => n !== Number([year, month, day, hour, minute][i]))) {
    throw new RepublishRefused(`${option} '${value}' is not a time that exists (no such day, hour or minute)`);
  }
  return time;
}

function batchSizeOf(value: string | undefined): number {
  if (value === undefined) return 1000;
  const size = /^\d+$/.test(value) ? Number(value) : Number.NaN;
  if (!Number.isSafeInteger(size) || size < 1 || size > MAX_BATCH_SIZE) throw new RepublishRefused(`--batch-size must be a whole number from 1 to ${MAX_BATCH_SIZE} (was '${value}')`);
  return size;
}

/** The command's arguments, checked against the clock; a RepublishRefused names what is wrong. */
export function parseRepublishArgs(args: string[], now: Date): RepublishRequest | 'help' {
  let parsed;
  try {
    parsed = parseArgs({
      args,
      strict: true,
      allowPositionals: false,
      options: {
        since: { type: 'string' },
        until: { type: 'string' },
        'dry-run': { type: 'boolean', default: false },
        force: { type: 'boolean', default: false },
        'batch-size': { type: 'string' },
        help: { type: 'boolean', short: 'h', default: false },
      },
    });
  } catch (error) {
    throw new RepublishRefused(error instanceof Error ? error.message : String(error));
  }
  const { values } = parsed;
  if (values.help) return 'help';
  if (values.since === undefined) throw new RepublishRefused('--since is required: the time from which to put the events back');
  const since = timeOf('--since', values.since);
  if (since.getTime() > now.getTime()) throw new RepublishRefused(`--since ${since.toISOString()} is in the future (it is ${now.toISOString()})`);
  const until = values.until === undefined ? undefined : timeOf('--until', values.until);
  if (until !== undefined && until.getTime() <= since.getTime()) throw new RepublishRefused(`--until ${until.toISOString()} must be after --since ${since.toISOString()}`);
  return { window: until === undefined ? { since } : { since, until }, dryRun: values['dry-run'], force: values.force, batchSize: batchSizeOf(values['batch-size']) };
}

function duration(ms: number): string {
  const units: Array<[number, string]> = [[86_400_000, 'day'], [3_600_000, 'hour'], [60_000, 'minute'], [1_000, 'second']];
  for (const [size, name] of units) if (ms >= size && ms % size === 0) return `${ms / size} ${name}${ms / size === 1 ? '' : 's'}`;
  return `${ms} ms`;
}

/** The max age the guard rail goes by, and where it comes from (said in its messages). */
interface MaxAge {
  ms: number;
  source: string;
}

/**
 * The guard rails of the window's start. The stream's max age: a consumer's inbox rows go once their
 * stream no longer holds their events (RetentionPruner, by the max age JetStream has for the stream),
 * so an event older than that may be handled again by a consumer that had handled it. The receipt
 * window: a consumer with no inbox row of an event (dead-lettered after its handler had sent a
 * command) sends its commands again, under keys whose receipts are pruned after it, and those would
 * be done a second time (docs/architecture.md, "How late a command comes again"). Returns the
 * warnings to print when --force overrides them.
 */
function windowChecks(request: RepublishRequest, maxAge: MaxAge, receiptTtlMs: number, now: Date): string[] {
  const whys: string[] = [];
  const since = request.window.since;
  if (maxAge.ms > 0 && since.getTime() < now.getTime() - maxAge.ms) {
    whys.push(
      `--since ${since.toISOString()} is older than the event stream's max age (${maxAge.source}: ${duration(maxAge.ms)}, ` +
        `so not before ${new Date(now.getTime() - maxAge.ms).toISOString()}): the consumers' inboxes are pruned after it, and events older than that would be handled a second time by consumers that had handled them`,
    );
  }
  if (since.getTime() < now.getTime() - receiptTtlMs) {
    whys.push(
      `--since ${since.toISOString()} is older than the receipt window (GANTRY_RECEIPT_TTL_MS: ${duration(receiptTtlMs)}, ` +
        `so not before ${new Date(now.getTime() - receiptTtlMs).toISOString()}): a consumer that had not handled such an event (it was dead-lettered) sends its commands again, and one whose receipt was pruned would be done a second time`,
    );
  }
  if (whys.length > 0 && !request.force) throw new RepublishRefused(`${whys.join('; ')}. Choose a later --since, or pass --force to put them back all the same`);
  return whys.map((why) => `warning (--force): ${why}`);
}

/** How long the command waits for NATS to connect, and for JetStream to answer. */
const NATS_WAIT_MS = 5_000;
const NANOS_PER_MS = 1_000_000;

/** JetStream could not be asked for the stream's configuration: nothing was changed. Exit 1. */
class StreamUnknown extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'StreamUnknown';
  }
}

/** The stream's max age, duplicate window and mark (StreamMark) as JetStream has them, or null when it has no such stream. */
async function streamOf(natsUrl: string, stream: string, service: string, now: Date): Promise<{ maxAgeMs: number; duplicateWindowMs: number; mark: StreamMark } | null> {
  const nc = await connect({ servers: natsUrl, name: `${service}:republish`, maxReconnectAttempts: 0, timeout: NATS_WAIT_MS });
  try {
    const jsm = await jetstreamManager(nc, { timeout: NATS_WAIT_MS });
    const info = await jsm.streams.info(stream).catch((error: unknown) => {
      if (isNotFound(error)) return null;
      throw error;
    });
    if (info === null) return null;
    const duplicateWindowMs = Math.floor((info.config.duplicate_window ?? 0) / NANOS_PER_MS);
    const { state } = info;
    // It never dropped a message, or it holds without a gap all it took since well before its
    // duplicate window (twice it: the server's clock and this one's need not agree).
    const dedupeSafe =
      state.first_seq <= 1 || (state.messages > 0 && (state.num_deleted ?? 0) === 0 && Date.parse(state.first_ts) <= now.getTime() - 2 * duplicateWindowMs);
    return {
      maxAgeMs: Math.floor((info.config.max_age ?? 0) / NANOS_PER_MS),
      duplicateWindowMs,
      mark: { created: info.created, nextSeq: state.last_seq + 1, firstSeq: state.first_seq, dedupeSafe },
    };
  } finally {
    await nc.close().catch(() => undefined);
  }
}

/**
 * The max age the guard rail goes by: the one JetStream has for the service's event stream, which
 * the consumers' inboxes are pruned by. A stream that does not exist (the state JetStream lost) is
 * created again by the service's relay with the installation's GANTRY_STREAM_MAX_AGE_MS, and pruned
 * by that from then on: that one. When JetStream cannot be asked, nothing is done, unless --force.
 * With it, the stream's mark (null when gone or not known), which says which earlier runs' events
 * it still holds (runsStillHeld).
 */
async function askStream(
  config: ServiceConfig,
  stream: string,
  request: RepublishRequest,
  service: string,
  now: Date,
  out: (line: string) => void,
  err: (line: string) => void,
): Promise<{ maxAge: MaxAge; mark: StreamMark | null }> {
  const configured = { ms: config.streamLimits.maxAgeMs, source: 'GANTRY_STREAM_MAX_AGE_MS' };
  let found;
  try {
    found = await streamOf(config.natsUrl, stream, service, now);
  } catch (error) {
    const why = `JetStream could not be asked for stream ${stream}'s max age (${error instanceof Error ? error.message : String(error)})`;
    if (!request.force) throw new StreamUnknown(`${why}; nothing changed. Run it again once NATS answers, or pass --force to go by GANTRY_STREAM_MAX_AGE_MS (${duration(configured.ms)})`);
    err(`warning (--force): ${why}; going by GANTRY_STREAM_MAX_AGE_MS (${duration(configured.ms)})`);
    return { maxAge: configured, mark: null };
  }
  if (found === null) {
    out(`stream ${stream} does not exist (JetStream lost it): the service's relay creates it again with GANTRY_STREAM_MAX_AGE_MS (${duration(configured.ms)})`);
    return { maxAge: { ms: configured.ms, source: `GANTRY_STREAM_MAX_AGE_MS, stream ${stream} being gone` }, mark: null };
  }
  out(`stream ${stream}: max age ${found.maxAgeMs === 0 ? 'none' : duration(found.maxAgeMs)}, duplicate window ${duration(found.duplicateWindowMs)} (from JetStream)`);
  return { maxAge: { ms: found.maxAgeMs, source: `stream ${stream}'s, from JetStream` }, mark: found.mark };
}

/** A GANTRY_DB_SCHEMA that is not a plain schema name is refused like a bad argument. */
function schemaNameCheck(schema: string): void {
  try {
    assertSchemaName(schema);
  } catch (error) {
    throw new RepublishRefused(`GANTRY_DB_SCHEMA: ${error instanceof Error ? error.message : String(error)}`);
  }
}

/** Refuses a schema without the event log's tables (a mistyped GANTRY_DB_SCHEMA) before anything is written. */
async function assertEventLog(pool: pg.Pool, schema: string): Promise<void> {
  const { rows } = await pool.query<{ events: string | null; outbox: string | null; runs: string | null }>(
    `SELECT to_regclass(format('%I.events', $1::text))::text AS events, to_regclass(format('%I.outbox', $1::text))::text AS outbox,
            to_regclass(format('%I.republish_runs', $1::text))::text AS runs`,
    [schema],
  );
  if (!rows[0]?.events || !rows[0]?.outbox) throw new RepublishRefused(`schema '${schema}' has no event log (events and outbox tables): is GANTRY_DB_SCHEMA the service's?`);
  // A log the service of this version has not migrated yet (its binary was upgraded, the service not started since).
  if (!rows[0]?.runs) throw new RepublishRefused(`schema '${schema}' is not migrated to this version (no republish_runs table): start the service of this version once, then run republish`);
}

function report(result: RepublishResult, dryRun: boolean): string[] {
  const lines = [
    dryRun
      ? `dry run: would put back ${result.putBack} events in the outbox (${result.alreadyWaiting} more already wait there); nothing was changed`
      : `put back ${result.putBack} events in the outbox in ${result.batches} batch${result.batches === 1 ? '' : 'es'} (${result.alreadyWaiting} more already waited there); the relay publishes them under their event ids`,
  ];
  if (result.leftOut > 0) {
    lines.push(
      `${dryRun ? 'would leave' : 'left'} out ${result.leftOut} events an earlier run put back, which the stream still holds: not published twice (docs/operations.md, "JetStream state lost")`,
    );
  }
  if (result.tallies.length > 0) lines.push('  stream type  event type  put back  already waiting');
  for (const t of result.tallies) lines.push(`  ${t.streamType}  ${t.type}  ${t.putBack}  ${t.alreadyWaiting}`);
  return lines;
}

export interface MaintenanceOutput {
  out(line: string): void;
  err(line: string): void;
}

export interface RepublishCommandOptions {
  service: string;
  /** The service's bounded context: its schema unless GANTRY_DB_SCHEMA names another. */
  context: Context;
  defaultPort: number;
  env: Record<string, string | undefined>;
  output: MaintenanceOutput;
  now?: () => Date;
}

/** Runs the command; answers the process's exit code: 0 done, 2 refused (nothing changed), 1 failed. */
export async function runRepublishCommand(args: string[], options: RepublishCommandOptions): Promise<number> {
  const scrub: SecretScrubber = secretScrubber(secretValuesIn(options.env));
  const out = (line: string) => options.output.out(scrub(line));
  const err = (line: string) => options.output.err(scrub(line));
  const now = (options.now ?? (() => new Date()))();
  let pool: pg.Pool | null = null;
  let writes = false;
  try {
    const request = parseRepublishArgs(args, now);
    if (request === 'help') {
      out(REPUBLISH_USAGE);
      return 0;
    }
    const config: ServiceConfig = settingsOf(serviceSettings({ service: options.service, schema: options.context, port: options.defaultPort, commandsOverHttp: false }), options.env);
    const stream = streamName(config.naming, options.context);
    const asked = await askStream(config, stream, request, options.service, now, out, err);
    for (const warning of windowChecks(request, asked.maxAge, config.retention.receiptTtlMs, now)) err(warning);
    out(
      `${options.service}: schema ${config.schema} on ${redactUrl(config.databaseUrl)}; events that occurred from ${request.window.since.toISOString()}` +
        (request.window.until ? ` to ${request.window.until.toISOString()} (exclusive)` : ' on'),
    );
    schemaNameCheck(config.schema);
    // The service's connect and keepalive bounds, not its query bound: a batch's search of a long log for its window may rightly take longer.
    const timeouts = { ...config.databaseTimeouts, queryMs: 0 };
    pool = createPool({ url: config.databaseUrl, schema: config.schema, max: 1, applicationName: `${options.service}:republish`, timeouts });
    await assertEventLog(pool, config.schema);
    const leaveOut = runsStillHeld(await recordedRuns(pool), asked.mark);
    writes = !request.dryRun;
    const work = { schema: config.schema, window: request.window, batchSize: request.batchSize, leaveOut, stream: asked.mark };
    const result = request.dryRun ? await countRepublishable(pool, work) : await putBackInOutbox(pool, work);
    for (const line of report(result, request.dryRun)) out(line);
    return 0;
  } catch (error) {
    const refused = error instanceof RepublishRefused || error instanceof SettingsError;
    const message = error instanceof Error ? error.message : String(error);
    // Each batch is committed on its own, with how far the run got: what a failed run put back stays, and a run again adds only the rest.
    const after = writes ? ' (events already put back stay in the outbox; running it again puts back the rest)' : '';
    err(refused ? `republish: refused, nothing changed: ${message}` : `republish: failed: ${message}${after}`);
    if (error instanceof RepublishRefused && /^(--since is required|Unknown option|Option)/.test(error.message)) err(REPUBLISH_USAGE);
    return refused ? 2 : 1;
  } finally {
    await pool?.end().catch(() => undefined);
  }
}
