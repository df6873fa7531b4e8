import { createHash, timingSafeEqual } from 'node:crypto';
import { Inject, Injectable, type CanActivate, type ExecutionContext } from '@nestjs/common';
import { ErrorCode, GantryError, type ErrorPayload } from '@gantry/contracts';
import { SERVICE_CONFIG, type ServiceConfig } from './config.js';

/** Equal-length digests, so the comparison takes the same time whatever the token's length. */
const digest = (token: string): Buffer => createHash('sha256').update(token, 'utf8').digest();

const REFUSAL = 'a bearer token is required (Authorization: Bearer <GANTRY_HTTP_TOKEN>)';
/** The refusal, in the shape of every refusal a service answers over HTTP (the exception filter answers the guard's so). */
const REFUSED: { ok: false; error: ErrorPayload } = { ok: false, error: { code: ErrorCode.UNAUTHENTICATED, message: REFUSAL } };

/** Whether an `Authorization` header presents the service's token (`null`: the service has none, all pass). */
function tokenCheck(token: string | null): (authorization: unknown) => boolean {
  if (token === null) return () => true;
  const expected = digest(token);
  return (authorization) => {
    const presented = /^Bearer +(\S+)\s*$/i.exec(typeof authorization === 'string' ? authorization : '')?.[1];
    return presented !== undefined && timingSafeEqual(digest(presented), expected);
  };
}

/**
 * `Authorization: Bearer <GANTRY_HTTP_TOKEN>` on the routes it guards (the commands over HTTP), when
 * the service has a token; without one the service is bound to the loopback interface and the
 * routes are open to this host only (docs/configuration.md, "Who can reach a service").
 */
@Injectable()
export class HttpTokenGuard implements CanActivate {
  private readonly accepts: (authorization: unknown) => boolean;

  constructor(@Inject(SERVICE_CONFIG) config: ServiceConfig) {
    this.accepts = tokenCheck(config.httpToken);
  }

  canActivate(context: ExecutionContext): boolean {
    const { headers } = context.switchToHttp().getRequest<{ headers: Record<string, string | string[] | undefined> }>();
    if (this.accepts(headers.authorization)) return true;
    throw new GantryError(ErrorCode.UNAUTHENTICATED, REFUSAL);
  }
}

/** The paths under HttpTokenGuard (express matches paths regardless of case). */
const GUARDED_PATH = /^\/+(commands|dead-letters|projections)(\/|$)/i;

interface MiddlewareRequest {
  method: string;
  path: string;
  headers: Record<string, string | string[] | undefined>;
}
interface MiddlewareResponse {
  status(code: number): { json(body: unknown): void };
  setHeader(name: string, value: string): void;
}

/**
 * The guard's refusal before the request's body is read: a caller without the token is answered 401
 * at once, and its body (as large as a command may be) is neither buffered nor parsed. Runs before
 * the body parser; the guard stays where the routes are, so a path this misses is still refused.
 */
export function refuseWithoutToken(
  token: string | null,
  log: { info(fields: object, message: string): void },
): (req: MiddlewareRequest, res: MiddlewareResponse, next: () => void) => void {
  const accepts = tokenCheck(token);
  return (req, res, next) => {
    if (!GUARDED_PATH.test(req.path) || accepts(req.headers.authorization)) return next();
    // Answered before the request log's middleware, which would have logged the guard's refusal.
    const given = req.headers['x-correlation-id'];
    log.info({ method: req.method, path: req.path, statusCode: 401, correlationId: (Array.isArray(given) ? given[0] : given) || undefined }, 'request refused: no valid bearer token');
    // The body is not read: the connection is not kept for another request behind it.
    res.setHeader('Connection', 'close');
    res.status(401).json(REFUSED);
  };
}
