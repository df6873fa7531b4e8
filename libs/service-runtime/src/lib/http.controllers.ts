import { Body, Controller, Get, HttpCode, Inject, Param, Post, Query, Res, Headers, UseGuards } from '@nestjs/common';
import { HealthCheck, HealthCheckService } from '@nestjs/terminus';
import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { ErrorCode, invalidCommand } from '@gantry/contracts';
import { EventStore } from '@gantry/eventstore';
import { Bus, listDeadLetters, replayDeadLetters } from '@gantry/messaging';
import { HttpTokenGuard } from './http-auth.js';
import { GantryTransport } from './transport/gantry-transport.js';
import { Liveness, Readiness } from './readiness.js';

interface HttpResponse {
  status(code: number): HttpResponse;
  json(body: unknown): void;
}

/**
 * GET /health (liveness) and GET /ready (readiness) from @nestjs/terminus: 200 with every check
 * `up`, or 503 with the failing checks under `error` (and all of them under `details`); both 503
 * once the service is shutting down. See docs/operations.md.
 */
@Controller()
export class HealthController {
  constructor(
    @Inject(HealthCheckService) private readonly health: HealthCheckService,
    @Inject(Readiness) private readonly readiness: Readiness,
    @Inject(Liveness) private readonly liveness: Liveness,
  ) {}

  @Get('health')
  @HealthCheck()
  alive() {
    return this.health.check(this.liveness.indicators());
  }

  @Get('ready')
  @HealthCheck()
  ready() {
    return this.health.check(this.readiness.indicators());
  }
}

const HTTP_STATUS: Record<string, number> = {
  [ErrorCode.INVALID_COMMAND]: 400,
  [ErrorCode.NOT_FOUND]: 404,
  [ErrorCode.UNKNOWN_PRODUCT]: 404,
  [ErrorCode.VERSION_CONFLICT]: 409,
  [ErrorCode.IDEMPOTENCY_CONFLICT]: 409,
  [ErrorCode.ALREADY_CLAIMED]: 409,
  [ErrorCode.INVALID_TRANSITION]: 409,
  [ErrorCode.PRECONDITION_FAILED]: 412,
  [ErrorCode.STALE_FENCE]: 409,
  [ErrorCode.LOCK_TIMEOUT]: 423,
  [ErrorCode.TIMEOUT]: 504,
  [ErrorCode.UNAVAILABLE]: 503,
  [ErrorCode.INTERNAL]: 500,
  [ErrorCode.CHECKS_FAILED]: 409,
  [ErrorCode.MERGE_CONFLICT]: 409,
  [ErrorCode.GH_AUTH_ERROR]: 502,
  [ErrorCode.AUTO_MERGE_NOT_ALLOWED]: 409,
  [ErrorCode.UNKNOWN]: 502,
};

/**
 * The same commands as on NATS, for people and tools: POST /commands/<name> with the JSON request;
 * with the service's bearer token when it has one.
 */
@Controller('commands')
@UseGuards(HttpTokenGuard)
export class CommandsController {
  constructor(@Inject(GantryTransport) private readonly commands: GantryTransport) {}

  @Post(':name')
  @HttpCode(200)
  async run(
    @Param('name') name: string,
    @Body() body: unknown,
    @Headers('x-correlation-id') correlationId: string | undefined,
    @Res() res: HttpResponse,
  ): Promise<void> {
    const reply = await this.commands.dispatch(name, body ?? {}, { correlationId: correlationId || randomUUID(), via: 'http' });
    res.status(reply.ok ? 200 : (HTTP_STATUS[reply.error.code] ?? 500)).json(reply);
  }

  @Get()
  list(): { commands: string[] } {
    return { commands: this.commands.commandNames };
  }
}

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
  async replay(@Body() body: unknown, @Res() res: HttpResponse): Promise<void> {
    const parsed = ReplayRequestSchema.safeParse(body ?? {});
    if (!parsed.success) return refuse(res, parsed.error, 'replay request');
    res.status(200).json({ ok: true, result: await replayDeadLetters(this.store.pool, this.bus.js, parsed.data) });
  }
}

function refuse(res: HttpResponse, error: z.ZodError, what: string): void {
  res.status(400).json({ ok: false, error: invalidCommand(error, what).toPayload() });
}
