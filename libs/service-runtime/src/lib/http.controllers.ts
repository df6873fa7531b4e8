import { Body, Controller, Get, HttpCode, Inject, Param, Post, Req, Res, Headers, UseGuards } from '@nestjs/common';
import { HealthCheck, HealthCheckService } from '@nestjs/terminus';
import { randomUUID } from 'node:crypto';
import { ErrorCode, GantryError } from '@gantry/contracts';
import { HttpTokenGuard } from './http-auth.js';
import { GantryTransport } from './transport/gantry-transport.js';
import { Liveness, Readiness } from './readiness.js';

export interface HttpResponse {
  status(code: number): HttpResponse;
  json(body: unknown): void;
  once(event: 'finish' | 'close', listener: () => void): unknown;
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
  [ErrorCode.UNAUTHENTICATED]: 401,
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
  [ErrorCode.REPLY_TOO_LARGE]: 502,
  [ErrorCode.CHECKS_FAILED]: 409,
  [ErrorCode.MERGE_CONFLICT]: 409,
  [ErrorCode.GH_AUTH_ERROR]: 502,
  [ErrorCode.AUTO_MERGE_NOT_ALLOWED]: 409,
  [ErrorCode.GH_RATE_LIMITED]: 503,
  [ErrorCode.UNKNOWN]: 502,
};

/** The HTTP status a refusal with `code` is answered with. */
export function httpStatusOf(code: string): number {
  return HTTP_STATUS[code] ?? 500;
}

export interface HttpRequest {
  headers: { 'content-type'?: string; 'content-length'?: string; 'transfer-encoding'?: string };
}

/** Whether the request carries a body (with no body at all, a command's request is `{}`). */
function hasBody(req: HttpRequest): boolean {
  return req.headers['transfer-encoding'] !== undefined || Number(req.headers['content-length'] ?? 0) > 0;
}

/**
 * The refusal of a body the JSON parser left alone, as its content type is not JSON's: read as `{}`,
 * it ran the command without what the caller sent, and a query that takes `{}` answered it.
 */
function bodyNotJson(name: string, contentType: string | undefined): GantryError {
  const message = `invalid ${name} request: the body is not JSON (content-type ${contentType ?? 'none'}); send it as application/json`;
  return new GantryError(ErrorCode.INVALID_COMMAND, message, undefined, [{ path: [], message: 'not JSON', code: 'invalid_json' }]);
}

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
    @Req() req: HttpRequest,
    @Res() res: HttpResponse,
  ): Promise<void> {
    if (body === undefined && hasBody(req)) throw bodyNotJson(name, req.headers['content-type']);
    await this.commands.answerOverHttp(name, body ?? {}, { correlationId: correlationId || randomUUID(), via: 'http' }, (reply) =>
      new Promise<void>((resolve) => {
        // Written out (or the caller gone) before a shutdown may drop the connection.
        res.once('finish', resolve);
        res.once('close', resolve);
        res.status(reply.ok ? 200 : httpStatusOf(reply.error.code)).json(reply);
      }),
    );
  }

  @Get()
  list(): { commands: string[] } {
    return { commands: this.commands.commandNames };
  }
}
