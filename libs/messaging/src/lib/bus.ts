import { AuthorizationError, connect, UserAuthenticationExpiredError, type NatsConnection } from '@nats-io/transport-node';
import pTimeout from 'p-timeout';
import {
  jetstream,
  jetstreamManager,
  type JetStreamClient,
  type JetStreamManager,
  RetentionPolicy,
  StorageType,
  DiscardPolicy,
  JetStreamApiError,
  type StreamInfo,
} from '@nats-io/jetstream';
import { eventStreamSubjects, streamName, dispatchStreamName, type Context, type Naming } from '@gantry/contracts';

export interface StreamOptions {
  replicas?: number;
  /** How long the server remembers a Nats-Msg-Id to drop a re-publish (at most the stream's max age). */
  duplicateWindowMs?: number;
  /** Messages older than this are dropped; 0 keeps them without an age limit. */
  maxAgeMs?: number;
  /** The stream drops its oldest messages beyond this size; -1 for no size limit. */
  maxBytes?: number;
}

export interface BusOptions {
  servers: string | string[];
  naming: Naming;
  /** Client name shown in the server's connection list. */
  name: string;
  /** The installation's stream settings: every stream this bus creates or updates gets them unless told otherwise. */
  streams?: StreamOptions;
  /** Told when a stream that existed was brought to these settings (for the log): what changed, from what to what. */
  onStreamSettingsChanged?: (stream: string, changes: StreamSettingChange[]) => void;
}

/** The settings of a stream the services own, each with the variable that gives it (docs/configuration.md). */
const OWNED_STREAM_SETTINGS = {
  subjects: 'GANTRY_SUBJECT_ROOT',
  max_age: 'GANTRY_STREAM_MAX_AGE_MS',
  max_bytes: 'GANTRY_STREAM_MAX_BYTES',
  // At most the max age, which shortens it.
  duplicate_window: 'GANTRY_STREAM_MAX_AGE_MS',
  num_replicas: 'GANTRY_STREAM_REPLICAS',
} as const;

type OwnedStreamSetting = keyof typeof OWNED_STREAM_SETTINGS;
type OwnedStreamSettings = { subjects: string[]; max_age: number; max_bytes: number; duplicate_window: number; num_replicas: number };

/** One setting of an existing stream brought to the configured value; durations in milliseconds. */
export interface StreamSettingChange {
  setting: OwnedStreamSetting;
  variable: string;
  from: number | string;
  to: number | string;
}

/** A setting's value as people read and write it: durations in milliseconds, subjects as a list. */
function readable(setting: OwnedStreamSetting, value: unknown): number | string {
  if (setting === 'subjects') return Array.isArray(value) ? value.join(',') : String(value);
  const number = Number(value ?? 0);
  return setting === 'max_age' || setting === 'duplicate_window' ? number / NANOS_PER_MS : number;
}

function streamSettingChanges(current: Partial<Record<OwnedStreamSetting, unknown>>, wanted: OwnedStreamSettings): StreamSettingChange[] {
  return (Object.keys(OWNED_STREAM_SETTINGS) as OwnedStreamSetting[]).flatMap((setting) => {
    const from = readable(setting, current[setting]);
    const to = readable(setting, wanted[setting]);
    return from === to ? [] : [{ setting, variable: OWNED_STREAM_SETTINGS[setting], from, to }];
  });
}

function describeSettings(wanted: OwnedStreamSettings): StreamSettingChange[] {
  return (['num_replicas', 'max_age', 'max_bytes'] as const).map((setting) => ({ setting, variable: OWNED_STREAM_SETTINGS[setting], from: '', to: readable(setting, wanted[setting]) }));
}

/** NATS refused to create a stream with the configured settings, or to bring an existing one to them. */
export class StreamSettingsRefusedError extends Error {
  constructor(stream: string, attempt: 'create' | 'change', changes: StreamSettingChange[], cause: unknown) {
    const reason = cause instanceof Error ? cause.message : String(cause);
    const settings =
      attempt === 'create'
        ? `to create it with ${changes.map((change) => `${change.setting} ${change.to} (${change.variable})`).join(', ')}`
        : `to change ${changes.map((change) => `${change.setting} from ${change.from} to ${change.to} (${change.variable})`).join(', ')}`;
    super(`stream ${stream}: NATS refused ${settings}: ${reason}`);
    this.name = 'StreamSettingsRefusedError';
  }
}

const NANOS_PER_MS = 1_000_000;
/** A consumer that is down longer than this misses events; see docs/DEVELOPING.md (retention). */
export const DEFAULT_STREAM_MAX_AGE_MS = 7 * 24 * 60 * 60 * 1000;
const DEFAULT_DUPLICATE_WINDOW_MS = 120_000;

export interface ConnectionHealth {
  ok: boolean;
  /** `connected`, `reconnecting` (the client is trying to get back), `no answer` or `closed`. */
  state: string;
  rttMs?: number;
}

/** The servers' addresses for a message: host and port, never a user, password or token. */
export function natsAddress(servers: string | string[]): string {
  const list = (Array.isArray(servers) ? servers : servers.split(',')).map((one) => one.trim()).filter(Boolean);
  return list
    .map((one) => {
      try {
        return new URL(one.includes('://') ? one : `nats://${one}`).host;
      } catch {
        return 'the configured server';
      }
    })
    .join(', ');
}

/** The setting that names the NATS servers in every Gantry process (docs/configuration.md). */
export const NATS_URL_SETTING = 'GANTRY_NATS_URL';

/** NATS could not be reached when the process connected: it names the servers' addresses, the setting and the cause. */
export class NatsUnreachableError extends Error {
  constructor(servers: string | string[], cause: unknown, setting = NATS_URL_SETTING) {
    const reason = cause instanceof Error ? [cause.message, cause.cause instanceof Error ? cause.cause.message : ''].filter(Boolean).join(': ') : String(cause);
    super(`NATS at ${natsAddress(servers)} (${setting}) is unreachable: ${reason}`);
    this.name = 'NatsUnreachableError';
  }
}

/**
 * NATS answered and refused the credentials the setting carries (or they had expired): not an outage
 * to wait out. Names the servers' addresses and the setting, never the user, password or token.
 */
export class NatsRefusedError extends Error {
  readonly code = 'NATS_REFUSED';

  constructor(servers: string | string[], cause: Error, setting = NATS_URL_SETTING) {
    // NATS's own words ("Authorization Violation", "User Authentication Expired") name no credential.
    super(`NATS at ${natsAddress(servers)} (${setting}) refused the credentials: ${cause.message}`);
    this.name = 'NatsRefusedError';
  }
}

async function reportingNatsUnreachable<T>(servers: string | string[], work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    if (error instanceof AuthorizationError || error instanceof UserAuthenticationExpiredError) throw new NatsRefusedError(servers, error);
    throw new NatsUnreachableError(servers, error);
  }
}

/** One NATS connection with its JetStream client and manager, and the installation's naming. */
export class Bus {
  private reconnecting = false;
  private losses = 0;
  private readonly watching: Promise<void>;

  private constructor(
    readonly nc: NatsConnection,
    readonly js: JetStreamClient,
    readonly jsm: JetStreamManager,
    readonly naming: Naming,
    private readonly streamDefaults: StreamOptions = {},
    private readonly onStreamSettingsChanged?: (stream: string, changes: StreamSettingChange[]) => void,
  ) {
    // The client reconnects by itself (forever); between a disconnect and a reconnect it is not closed, just not there.
    this.watching = (async () => {
      for await (const status of nc.status()) {
        if (status.type === 'disconnect') this.losses++;
        if (status.type === 'disconnect' || status.type === 'reconnecting') this.reconnecting = true;
        else if (status.type === 'reconnect') this.reconnecting = false;
      }
    })().catch(() => undefined);
  }

  static async connect(options: BusOptions): Promise<Bus> {
    const nc = await reportingNatsUnreachable(options.servers, () => connect({
      servers: options.servers,
      name: options.name,
      maxReconnectAttempts: -1,
      reconnectTimeWait: 500,
      // Without this every request (a command, a JetStream publish's acknowledgement) builds an Error
      // up front to carry its caller's stack, in case it fails: a few per cent of a busy service's CPU.
      // A failed request still says what failed and why; its stack starts in the client.
      noAsyncTraces: true,
    }));
    const jsm = await jetstreamManager(nc);
    return new Bus(nc, jetstream(nc), jsm, options.naming, options.streams, options.onStreamSettingsChanged);
  }

  get connected(): boolean {
    return !this.nc.isClosed() && !this.nc.isDraining() && !this.reconnecting;
  }

  /**
   * How many times the connection was lost since it was made: a change says the server may have gone
   * without this process for a while — however briefly it was seen to be down — and dropped its
   * subscriptions meanwhile (the job service's lease sweep resumes leases on it, docs/jobs.md).
   */
  get connectionLosses(): number {
    return this.losses;
  }

  /** Whether the server answers now: the connection's state, then a round trip bounded by `timeoutMs`. */
  async health(timeoutMs = 1000): Promise<ConnectionHealth> {
    if (this.nc.isClosed() || this.nc.isDraining()) return { ok: false, state: 'closed' };
    if (this.reconnecting) return { ok: false, state: 'reconnecting' };
    try {
      const rtt = await pTimeout(this.nc.rtt(), { milliseconds: timeoutMs, fallback: () => null });
      return rtt === null ? { ok: false, state: 'no answer' } : { ok: true, state: 'connected', rttMs: Math.round(rtt * 100) / 100 };
    } catch {
      return { ok: false, state: 'no answer' };
    }
  }

  /**
   * The context's event stream: limits retention, file storage. Creating it twice changes nothing; an
   * existing one is brought to the bus's stream settings (a refusal throws StreamSettingsRefusedError).
   */
  async ensureEventStream(context: Context, options: StreamOptions = {}): Promise<string> {
    const name = streamName(this.naming, context);
    await this.ensureStream(name, eventStreamSubjects(this.naming, context), RetentionPolicy.Limits, options);
    return name;
  }

  /**
   * Another context's stream, for a consumer that may start before that context's service: created
   * with defaults when missing, never reconfigured (its owner decides its settings).
   */
  async ensureForeignEventStream(context: Context, options: StreamOptions = {}): Promise<string> {
    const name = streamName(this.naming, context);
    try {
      await this.jsm.streams.info(name);
    } catch (error) {
      if (!isNotFound(error)) throw error;
      await this.ensureStream(name, eventStreamSubjects(this.naming, context), RetentionPolicy.Limits, options);
    }
    return name;
  }

  /** Offers to runners: a work queue, so each offer is delivered to one consumer of its kind. */
  async ensureDispatchStream(options: StreamOptions = {}): Promise<string> {
    const name = dispatchStreamName(this.naming);
    await this.ensureStream(name, [`${this.naming.subjectRoot}.dispatch.>`], RetentionPolicy.Workqueue, options);
    return name;
  }

  /** The limits a stream is created (or updated) with: the call's options over the bus's over the defaults. */
  streamLimits(options: StreamOptions = {}): { max_age: number; max_bytes: number; duplicate_window: number; num_replicas: number } {
    const merged = { ...this.streamDefaults, ...options };
    const maxAgeMs = merged.maxAgeMs ?? DEFAULT_STREAM_MAX_AGE_MS;
    const window = merged.duplicateWindowMs ?? DEFAULT_DUPLICATE_WINDOW_MS;
    return {
      max_age: maxAgeMs * NANOS_PER_MS,
      max_bytes: merged.maxBytes ?? -1,
      // The server refuses a duplicate window longer than the stream keeps its messages.
      duplicate_window: (maxAgeMs > 0 ? Math.min(window, maxAgeMs) : window) * NANOS_PER_MS,
      num_replicas: merged.replicas ?? 1,
    };
  }

  private async ensureStream(name: string, subjects: string[], retention: RetentionPolicy, options: StreamOptions): Promise<void> {
    const limits = this.streamLimits(options);
    const wanted = { subjects, ...limits };
    let current: StreamInfo;
    try {
      current = await this.jsm.streams.info(name);
    } catch (error) {
      if (!isNotFound(error)) throw error;
      try {
        await this.jsm.streams.add({ name, retention, storage: StorageType.File, discard: DiscardPolicy.Old, ...wanted });
      } catch (addError) {
        // Another replica created it between our look and our add.
        if (isAlreadyInUse(addError)) return;
        throw new StreamSettingsRefusedError(name, 'create', describeSettings(wanted), addError);
      }
      return;
    }
    const changes = streamSettingChanges(current.config, wanted);
    if (changes.length === 0) return;
    const raised = changes.find((change) => change.setting === 'num_replicas' && Number(change.to) > 1);
    // A server that is not in a cluster refuses a stream of several replicas when it is created, but
    // (NATS 2.9) takes the same change to an existing one and records it while keeping one copy.
    if (raised && current.cluster?.name === undefined) {
      throw new StreamSettingsRefusedError(name, 'change', changes, new Error('replicas > 1 not supported in non-clustered mode'));
    }
    try {
      await this.jsm.streams.update(name, Object.fromEntries(changes.map((change) => [change.setting, wanted[change.setting]])));
    } catch (error) {
      throw new StreamSettingsRefusedError(name, 'change', changes, error);
    }
    this.onStreamSettingsChanged?.(name, changes);
  }

  /**
   * Drains the connection (what was published goes out first), or closes it once NATS has not
   * confirmed the drain within `drainBoundMs` (DRAIN_BOUND_MS unless a stop has less left): a server
   * that stopped answering (a partition, a frozen server) never does, and the stop would wait for it
   * for ever. Closing a closed bus does nothing.
   */
  async close(drainBoundMs = DRAIN_BOUND_MS): Promise<void> {
    if (!this.nc.isClosed() && !(await withinDrainBound(this.nc.drain(), drainBoundMs))) await this.nc.close().catch(() => undefined);
    await this.watching;
  }
}

/**
 * How long a stop waits for NATS to confirm a drain (a subscription's or the connection's): a server
 * that answers does so in milliseconds; one that stopped answering never does.
 */
export const DRAIN_BOUND_MS = 5_000;

/** Whether the drain was confirmed within `boundMs` (false: it failed, or NATS did not answer). */
export async function withinDrainBound(drain: Promise<unknown>, boundMs = DRAIN_BOUND_MS): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), Math.max(0, boundMs))));
  try {
    return await Promise.race([drain.then(() => true, () => false), bound]);
  } finally {
    clearTimeout(timer);
  }
}

/** A stream or consumer that does not exist, told by the JetStream API's error (never by its text). */
export function isNotFound(error: unknown): boolean {
  return error instanceof JetStreamApiError && error.apiError().code === 404;
}

/** The server's JSStreamNameExistErr (nats.js names only a few codes in JetStreamApiCodes). */
const STREAM_NAME_IN_USE = 10058;

/** Creating a stream that another process created first (with other settings). */
export function isAlreadyInUse(error: unknown): boolean {
  return error instanceof JetStreamApiError && error.code === STREAM_NAME_IN_USE;
}
