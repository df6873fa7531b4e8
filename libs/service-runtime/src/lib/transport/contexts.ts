import { BaseRpcContext } from '@nestjs/microservices';
import type pg from 'pg';
import type { EventEnvelope } from '@gantry/contracts';
import type { BeforeCommit, CommandContext } from '@gantry/messaging';

/**
 * What a command handler learns about the call besides the request: `@Ctx()` (or the second
 * argument of a `@CommandHandler` method). `via` is the subject the request came in on, or `http`.
 */
export class CommandCallContext extends BaseRpcContext<[CommandContext]> implements CommandContext {
  get correlationId(): string {
    return this.args[0].correlationId;
  }

  get via(): string {
    return this.args[0].via;
  }
}

/**
 * What a durable consumer's handler gets besides the event: the open transaction in which the
 * inbox row was written. Everything the handler writes goes through `sql`, so it commits (and the
 * event is acknowledged) together with the inbox row, or not at all.
 */
export class ConsumerContext extends BaseRpcContext<
  [{ sql: pg.PoolClient; consumer: string; event: EventEnvelope; beforeCommit: BeforeCommit; batch: readonly EventEnvelope[] }]
> {
  get sql(): pg.PoolClient {
    return this.args[0].sql;
  }

  /** The durable consumer's name (also its inbox scope). */
  get consumer(): string {
    return this.args[0].consumer;
  }

  get event(): EventEnvelope {
    return this.args[0].event;
  }

  /**
   * Every event handled in this transaction, this one among them, in the order they are handled
   * (the same array for each of them): what a handler may read for all at once, at the first.
   */
  get batch(): readonly EventEnvelope[] {
    return this.args[0].batch;
  }

  /**
   * Hands over work the handler wants done before its event is acknowledged, such as a publish:
   * `start` is called once every handler of the batch has run, the batch's pieces of work all in one
   * go (their messages leave together), and the transaction commits only once all of it has
   * succeeded; if it fails, the handler has failed.
   */
  beforeCommit(start: () => Promise<unknown>): void {
    this.args[0].beforeCommit(start);
  }
}
