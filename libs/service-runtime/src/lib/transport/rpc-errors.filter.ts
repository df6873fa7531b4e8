import { Catch, type ArgumentsHost } from '@nestjs/common';
import { BaseExceptionFilter } from '@nestjs/core';
import { throwError, type Observable } from 'rxjs';

/**
 * The application's last exception filter. For the transport (`rpc`) it hands every error on
 * unchanged, so the transport turns a GantryError into the refusal it names and a consumer's
 * RetryLater into a redelivery (Nest's default RPC filter would replace both with a generic
 * "Internal server error"). HTTP errors get Nest's usual handling. Filters a controller declares
 * itself run before this one.
 */
@Catch()
export class GantryExceptionFilter extends BaseExceptionFilter {
  override catch(exception: unknown, host: ArgumentsHost): Observable<never> | void {
    if (host.getType() === 'rpc') return throwError(() => exception);
    super.catch(exception, host);
  }
}
