import { createHash, timingSafeEqual } from 'node:crypto';
import { Inject, Injectable, UnauthorizedException, type CanActivate, type ExecutionContext } from '@nestjs/common';
import { SERVICE_CONFIG, type ServiceConfig } from './config.js';

/** Equal-length digests, so the comparison takes the same time whatever the token's length. */
const digest = (token: string): Buffer => createHash('sha256').update(token, 'utf8').digest();

/**
 * `Authorization: Bearer <GANTRY_HTTP_TOKEN>` on the routes it guards (the commands over HTTP), when
 * the service has a token; without one the service is bound to the loopback interface and the
 * routes are open to this host only (docs/configuration.md, "Who can reach a service").
 */
@Injectable()
export class HttpTokenGuard implements CanActivate {
  private readonly expected: Buffer | null;

  constructor(@Inject(SERVICE_CONFIG) config: ServiceConfig) {
    this.expected = config.httpToken === null ? null : digest(config.httpToken);
  }

  canActivate(context: ExecutionContext): boolean {
    if (this.expected === null) return true;
    const { headers } = context.switchToHttp().getRequest<{ headers: Record<string, string | string[] | undefined> }>();
    const presented = /^Bearer +(\S+)\s*$/i.exec(typeof headers.authorization === 'string' ? headers.authorization : '')?.[1];
    if (presented !== undefined && timingSafeEqual(digest(presented), this.expected)) return true;
    throw new UnauthorizedException('a bearer token is required (Authorization: Bearer <GANTRY_HTTP_TOKEN>)');
  }
}
