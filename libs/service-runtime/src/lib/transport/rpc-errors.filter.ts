import { Catch, HttpException, HttpStatus, type ArgumentsHost } from '@nestjs/common';
import { BaseExceptionFilter } from '@nestjs/core';
import { throwError, type Observable } from 'rxjs';
import { ErrorCode, GantryError, type ErrorPayload, type ValidationIssue } from '@gantry/contracts';
import { httpStatusOf, type HttpResponse } from '../http.controllers.js';

/** What a request body can be refused for before a handler sees it (express's body parser): not JSON, too large, not JSON's type. */
const REFUSED_BODY = new Set<number>([HttpStatus.BAD_REQUEST, HttpStatus.PAYLOAD_TOO_LARGE, HttpStatus.UNSUPPORTED_MEDIA_TYPE]);
const BODY_ISSUE: Record<number, string> = {
  [HttpStatus.BAD_REQUEST]: 'invalid_json',
  [HttpStatus.PAYLOAD_TOO_LARGE]: 'too_big',
  [HttpStatus.UNSUPPORTED_MEDIA_TYPE]: 'unsupported_media_type',
};

/** The issue of a body the parser refused: the one its check named (bootstrap.ts), else by its status. */
function bodyIssueOf(exception: HttpException): ValidationIssue {
  const cause = exception.cause as { issue?: ValidationIssue; type?: string } | undefined;
  if (cause?.issue) return cause.issue;
  const code = cause?.type === 'charset.unsupported' ? 'unsupported_charset' : (BODY_ISSUE[exception.getStatus()] ?? 'invalid_body');
  return { path: [], message: exception.message, code };
}

/**
 * The application's last exception filter. For the transport (`rpc`) it hands every error on
 * unchanged, so the transport turns a GantryError into the refusal it names and a consumer's
 * RetryLater into a redelivery (Nest's default RPC filter would replace both with a generic
 * "Internal server error"). Filters a controller declares itself run before this one.
 *
 * Over HTTP, a failure is answered in the shape every answer of the service has
 * (`{ ok: false, error: { code, message } }`, as POST /commands answers one): a GantryError with
 * its code, a body express refused (not JSON, too large) as `INVALID_COMMAND`, and anything else —
 * a database that failed under GET /dead-letters, say — as 500 `INTERNAL`, its cause only in the
 * log (docs/operations.md). A caller without the bearer token is a GantryError (`UNAUTHENTICATED`, 401).
 * The answers Nest and terminus make with a status of their own (404 for a path no route has, /ready's
 * 503 with its checks) are left as they are.
 */
@Catch()
export class GantryExceptionFilter extends BaseExceptionFilter {
  constructor(
    applicationRef: ConstructorParameters<typeof BaseExceptionFilter>[0],
    /** The service's logger (a PinoLogger): its lines carry the request's correlation id. */
    private readonly log: { error(fields: object, message: string): void } | null = null,
  ) {
    super(applicationRef);
  }

  override catch(exception: unknown, host: ArgumentsHost): Observable<never> | void {
    if (host.getType() === 'rpc') return throwError(() => exception);
    if (host.getType() !== 'http') return super.catch(exception, host);
    if (exception instanceof HttpException && !REFUSED_BODY.has(exception.getStatus())) return super.catch(exception, host);
    const http = host.switchToHttp();
    const response = http.getResponse<HttpResponse & { headersSent?: boolean; end(): void }>();
    const request = http.getRequest<{ id?: unknown; method?: string; url?: string }>();
    let status: number;
    let error: ErrorPayload;
    if (exception instanceof GantryError) {
      status = httpStatusOf(exception.code);
      error = exception.toPayload();
    } else if (exception instanceof HttpException) {
      status = exception.getStatus();
      // With an issue, as a body that is not JSON is refused over NATS.
      const message = `the request's body was refused: ${exception.message}`;
      error = { code: ErrorCode.INVALID_COMMAND, message, issues: [bodyIssueOf(exception)] };
    } else {
      const correlationId = typeof request.id === 'string' ? request.id : undefined;
      const route = `${request.method ?? ''} ${(request.url ?? '').split('?')[0]}`;
      // The cause (a driver's message, its stack) is for the log: the caller learns where to look.
      this.log?.error(
        { error: exception instanceof Error ? { name: exception.name, message: exception.message, stack: exception.stack } : String(exception), route },
        'request failed',
      );
      status = HttpStatus.INTERNAL_SERVER_ERROR;
      error = { code: ErrorCode.INTERNAL, message: `internal error in ${route}`, ...(correlationId ? { details: { correlationId } } : {}) };
    }
    if (response.headersSent) return response.end();
    response.status(status).json({ ok: false, error });
  }
}
