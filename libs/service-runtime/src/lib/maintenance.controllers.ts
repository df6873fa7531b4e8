import { Body, Controller, Get, HttpCode, Inject, Post, Query, Res, UseGuards } from '@nestjs/common';
import { z } from 'zod';
import { invalidCommand } from '@gantry/contracts';
import { EventStore, rebuildProjections } from '@gantry/eventstore';
import { Bus, listDeadLetters, replayDeadLetters } from '@gantry/messaging';
import { HttpTokenGuard } from './http-auth.js';
import type { HttpResponse } from './http.controllers.js';

// An operator's tools on a service's HTTP server, with its bearer token like /commands
// (docs/operations.md, "Dead letters" and "Rebuilding the views").

const DeadLettersQuerySchema = z
  .object({
    consumer: z.string().min(1).optional(),
    limit: z.coerce.number().int().min(1).max(1000).default(100),
  })
  .strict();

const ReplayRequestSchema = z
  .object({
    consumer: z.string().min(1).optional(),
    ids: z.array(z.number().int().positive()).min(1).max(500).optional(),
  })
  .strict()
  .refine((r) => r.consumer !== undefined || r.ids !== undefined, { message: "name a consumer, or the dead letters' ids" });

/**
 * The events this service's consumers gave up on (docs/operations.md, "Dead letters"): GET
 * /dead-letters lists them (`?consumer=`, `?limit=`, oldest first); POST /dead-letters/replay hands
 * those a consumer's handler failed on back to it, by consumer or by id. With the service's bearer
 * token, like /commands.
 */
@Controller('dead-letters')
@UseGuards(HttpTokenGuard)
export class DeadLettersController {
  constructor(
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(Bus) private readonly bus: Bus,
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
    res.status(200).json({ ok: true, result: await replayDeadLetters(this.store.pool, this.bus.js, parsed.data) });
  }
}

function refuse(res: HttpResponse, error: z.ZodError, what: string): void {
  res.status(400).json({ ok: false, error: invalidCommand(error, what).toPayload() });
}


/** A rebuild takes no options: every view of the service, from the whole log. */
const RebuildRequestSchema = z.object({}).strict();

/**
 * The views a service keeps from its log (its inline projections): GET /projections names them and
 * their tables; POST /projections/rebuild empties them and replays the whole log into them, all of
 * them at once — some share tables (one empties what another fills), so a part of them alone would
 * not come back whole. Appends wait while it runs (`rebuildProjections` holds the log in SHARE
 * mode), so the rebuilt views are exactly what the live ones would be.
 */
@Controller('projections')
@UseGuards(HttpTokenGuard)
export class ProjectionsController {
  constructor(@Inject(EventStore) private readonly store: EventStore) {}

  @Get()
  list(): { ok: true; result: { projections: Array<{ name: string; tables: string[] }> } } {
    return { ok: true, result: { projections: this.store.projections.map((p) => ({ name: p.name, tables: [...p.tables] })) } };
  }

  @Post('rebuild')
  async rebuild(@Body() body: unknown, @Res() res: HttpResponse): Promise<void> {
    const parsed = RebuildRequestSchema.safeParse(body ?? {});
    if (!parsed.success) return refuse(res, parsed.error, 'rebuild request');
    const started = performance.now();
    const events = await rebuildProjections(this.store, this.store.projections);
    const seconds = +((performance.now() - started) / 1000).toFixed(3);
    res.status(200).json({ ok: true, result: { projections: this.store.projections.map((p) => p.name), events, seconds } });
  }
}
