import { connect, type NatsConnection } from '@nats-io/transport-node';
import {
  jetstream,
  jetstreamManager,
  type JetStreamClient,
  type JetStreamManager,
  RetentionPolicy,
  StorageType,
  DiscardPolicy,
} from '@nats-io/jetstream';
import { eventFilter, streamName, dispatchStreamName, type Context, type Naming } from '@gantry/contracts';

export interface BusOptions {
  servers: string | string[];
  naming: Naming;
  /** Client name shown in the server's connection list. */
  name: string;
}

export interface StreamOptions {
  replicas?: number;
  /** How long the server remembers a Nats-Msg-Id to drop a re-publish. */
  duplicateWindowMs?: number;
  maxAgeMs?: number;
}

const NANOS_PER_MS = 1_000_000;

/** One NATS connection with its JetStream client and manager, and the installation's naming. */
export class Bus {
  private constructor(
    readonly nc: NatsConnection,
    readonly js: JetStreamClient,
    readonly jsm: JetStreamManager,
    readonly naming: Naming,
  ) {}

  static async connect(options: BusOptions): Promise<Bus> {
    const nc = await connect({
      servers: options.servers,
      name: options.name,
      maxReconnectAttempts: -1,
      reconnectTimeWait: 500,
    });
    const jsm = await jetstreamManager(nc);
    return new Bus(nc, jetstream(nc), jsm, options.naming);
  }

  get connected(): boolean {
    return !this.nc.isClosed() && !this.nc.isDraining();
  }

  /** The context's event stream: limits retention, file storage. Creating it twice changes nothing. */
  async ensureEventStream(context: Context, options: StreamOptions = {}): Promise<string> {
    const name = streamName(this.naming, context);
    await this.ensureStream(name, [eventFilter(this.naming, context)], RetentionPolicy.Limits, options);
    return name;
  }

  /**
   * Another context's stream, for a consumer that may start before that context's service: created
   * with defaults when missing, never reconfigured (its owner decides its settings).
   */
  async ensureForeignEventStream(context: Context): Promise<string> {
    const name = streamName(this.naming, context);
    try {
      await this.jsm.streams.info(name);
    } catch (error) {
      if (!isNotFound(error)) throw error;
      await this.ensureStream(name, [eventFilter(this.naming, context)], RetentionPolicy.Limits, {});
    }
    return name;
  }

  /** Offers to runners: a work queue, so each offer is delivered to one consumer of its kind. */
  async ensureDispatchStream(options: StreamOptions = {}): Promise<string> {
    const name = dispatchStreamName(this.naming);
    await this.ensureStream(name, [`${this.naming.subjectRoot}.dispatch.>`], RetentionPolicy.Workqueue, options);
    return name;
  }

  private async ensureStream(name: string, subjects: string[], retention: RetentionPolicy, options: StreamOptions): Promise<void> {
    const config = {
      name,
      subjects,
      retention,
      storage: StorageType.File,
      discard: DiscardPolicy.Old,
      num_replicas: options.replicas ?? 1,
      duplicate_window: (options.duplicateWindowMs ?? 120_000) * NANOS_PER_MS,
      max_age: (options.maxAgeMs ?? 0) * NANOS_PER_MS,
    };
    try {
      await this.jsm.streams.info(name);
      await this.jsm.streams.update(name, { subjects, duplicate_window: config.duplicate_window, max_age: config.max_age });
    } catch (error) {
      if (!isNotFound(error)) throw error;
      try {
        await this.jsm.streams.add(config);
      } catch (addError) {
        // Another replica created it between our look and our add.
        if (!/already in use|already exists/i.test(String(addError))) throw addError;
      }
    }
  }

  async close(): Promise<void> {
    if (this.nc.isClosed()) return;
    await this.nc.drain().catch(() => this.nc.close());
  }
}

export function isNotFound(error: unknown): boolean {
  const e = error as { code?: unknown; message?: string; api_error?: { code?: number; err_code?: number } };
  return (
    e?.api_error?.code === 404 ||
    e?.code === 404 ||
    e?.code === '404' ||
    /not found/i.test(e?.message ?? '')
  );
}
