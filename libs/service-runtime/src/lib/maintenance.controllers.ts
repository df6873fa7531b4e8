import { Body, Controller, Get, HttpCode, Inject, Post, Query, Res, UseGuards } from '@nestjs/common';
import { InjectPinoLogger, PinoLogger } from 'nestjs-pino';
import { z } from 'zod';
import { ErrorCode, invalidCommand, isSubjectToken } from '@gantry/contracts';
import { EventStore, rebuildProjections } from '@gantry/eventstore';
import { Bus, discardDeadLetters, listDeadLetters, replayDeadLetters, type DiscardOutcome, type ReplayOutcome } from '@gantry/messaging';
import { HttpTokenGuard } from './http-auth.js';
import type { HttpResponse } from './http.controllers.js';

// An operator's tools on a service's HTTP server, with its bearer token like /commands
// (docs/operations.md, "Dead letters" and "Rebuilding the views").

/**
 * A consumer's name is a durable's, one token (a NUL in it would fail the query as INTERNAL rather
 * than find nothing).
 */
const ConsumerNameSchema = z.string().min(1).refine(isSubjectToken, 'a consumer name is one token: no dots, wildcards, whitespace or control characters');

const DeadLettersQuerySchema = z
  .object({
    consumer: ConsumerNameSchema.optional(),
    limit: z.coerce.number().int().min(1).max(1000).default(100),
  })
  .strict();

const ReplayRequestSchema = z
  .object({
    consumer: ConsumerNameSchema.optional(),
    ids: z.array(z.number().int().positive()).min(1).max(500).optional(),
    /** Also the dead letters older than the receipt window (replayDeadLetters). */
    force: z.boolean().optional(),
  })
  .strict()
  .refine((r) => r.consumer !== undefined || r.ids !== undefined, { message: "name a consumer, or the dead letters' ids" });

/** Dead letters are discarded by id only: an operator names what they looked at. */
const DiscardRequestSchema = z.object({ ids: z.array(z.number().int().positive()).min(1).max(500) }).strict();

/**
 * The events this service's consumers gave up on (docs/operations.md, "Dead letters"): GET
 * /dead-letters lists them (`?consumer=`, `?limit=`, oldest first); POST /dead-letters/replay hands
 * those a consumer's handler failed on back to it, by consumer or by id; POST /dead-letters/discard
 * deletes the ones named. With the service's bearer token, like /commands.
 */
@Controller('dead-letters')
@UseGuards(HttpTokenGuard)
export class DeadLettersController {
  constructor(
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(Bus) private readonly bus: Bus,
    @InjectPinoLogger('dead-letters') private readonly log: PinoLogger,
  ) {}

  @Get()
  async list(@Query() query: unknown, @Res() res: HttpResponse): Promise<void> {
    const parsed = DeadLettersQuerySchema.safeParse(query);
    if (!parsed.success) return refuse(res, parsed.error, 'query');
    const { consumer, limit } = parsed.data;
    res.status(200).json({ ok: true, result: { deadLetters: await listDeadLetters(this.store.pool, { consumer }, limit) } });
  }

  @Post('replay')
  @HttpCode(200)
  async replay(@Body() body: unknown, @Res() res: HttpResponse): Promise<void> {
    const parsed = ReplayRequestSchema.safeParse(body ?? {});
    if (!parsed.success) return refuse(res, parsed.error, 'replay request');
    let outcome: ReplayOutcome;
    try {
      const { force, ...filter } = parsed.data;
      outcome = await replayDeadLetters(this.store.pool, this.bus.js, filter, undefined, {
        receiptWindow: { ms: this.store.receiptTtlMs, setting: 'GANTRY_RECEIPT_TTL_MS' },
        force,
      });
    } catch (error) {
      // Its transaction rolled back, so every row stays; what it had published is dropped as a
      // duplicate when handed back again.
      return fail(res, this.log, error, 'the replay failed and was rolled back: its dead letters are all still there (a consumer given one already finds it in its inbox)');
    }
    res.status(200).json({ ok: true, result: outcome });
  }

  @Post('discard')
  async discard(@Body() body: unknown, @Res() res: HttpResponse): Promise<void> {
    const parsed = DiscardRequestSchema.safeParse(body ?? {});
    if (!parsed.success) return refuse(res, parsed.error, 'discard request');
    let outcome: DiscardOutcome;
    try {
      outcome = await discardDeadLetters(this.store.pool, parsed.data.ids);
    } catch (error) {
      return fail(res, this.log, error, 'the discard failed: no dead letter was deleted');
    }
    // What an operator dropped stays on record in the log, since the rows are gone.
    for (const letter of outcome.discarded) this.log.warn({ deadLetter: letter }, 'dead letter discarded');
    res.status(200).json({ ok: true, result: outcome });
  }
}

function refuse(res: HttpResponse, error: z.ZodError, what: string): void {
  res.status(400).json({ ok: false, error: invalidCommand(error, what).toPayload() });
}

/**
 * An operation that failed for a reason of its own (the database refused it, the connection went):
 * logged with its cause, answered 500 `INTERNAL` with what it left, in the shape every answer has.
 */
function fail(res: HttpResponse, log: PinoLogger, error: unknown, message: string): void {
  log.error({ error: error instanceof Error ? { name: error.name, message: error.message } : String(error) }, message);
  res.status(500).json({ ok: false, error: { code: ErrorCode.INTERNAL, message } });
}


/** A rebuild takes no options: every view of the service, from the whole log. */
const RebuildRequestSchema = z.object({}).strict();

/**
 * The views a service keeps from its log (its inline projections): GET /projections names them and
 * their tables; POST /projections/rebuild replays the whole log into copies of them and swaps those
 * in, all of them at once — some share tables (one empties what another fills), so a part of them
 * alone would not come back whole. Commands go on during the replay; appends wait only for its
 * catch-up and the swap (`rebuildProjections`), and the rebuilt views are exactly what the live ones
 * would be (docs/operations.md, "Rebuilding the views").
 */
@Controller('projections')
@UseGuards(HttpTokenGuard)
export class ProjectionsController {
  constructor(
    @Inject(EventStore) private readonly store: EventStore,
    @InjectPinoLogger('projections') private readonly log: PinoLogger,
  ) {}

  @Get()
  list(): { ok: true; result: { projections: Array<{ name: string; tables: string[] }> } } {
    return { ok: true, result: { projections: this.store.projections.map((p) => ({ name: p.name, tables: [...p.tables] })) } };
  }

  @Post('rebuild')
  async rebuild(@Body() body: unknown, @Res() res: HttpResponse): Promise<void> {
    const parsed = RebuildRequestSchema.safeParse(body ?? {});
    if (!parsed.success) return refuse(res, parsed.error, 'rebuild request');
    const started = performance.now();
    let events: number;
    try {
      events = await rebuildProjections(this.store, this.store.projections);
    } catch (error) {
      // One transaction: the views, their indexes and settings are as they were before it.
      return fail(res, this.log, error, 'the rebuild failed and was rolled back: every view is as it was before it');
    }
    const seconds = +((performance.now() - started) / 1000).toFixed(3);
    res.status(200).json({ ok: true, result: { projections: this.store.projections.map((p) => p.name), events, seconds } });
  }
}
