import { Controller, Headers, Inject, Post, Req, Res } from '@nestjs/common';
import type { ErrorPayload } from '@gantry/contracts';
import { httpStatusOf } from '@gantry/service-runtime';
import { WebhookIntake } from '../../application/webhook-intake.js';

interface HttpResponse {
  status(code: number): HttpResponse;
  json(body: unknown): void;
}

/**
 * `POST /webhooks/github`: answered as soon as the delivery is recorded (GitHub waits 10 s at most); processed after.
 * Its body comes as bytes, unparsed (the service's `rawBodyRoutes`): the intake checks the signature before it parses it.
 * A refusal has the shape of every refusal the service answers over HTTP (`{ ok: false, error: { code, message } }`,
 * as the body parser's own — not JSON, too large — are answered), with the status GitHub's delivery log shows:
 * 401 `UNAUTHENTICATED` for a missing or wrong signature, 400 `INVALID_COMMAND` for a signed delivery that is not one.
 */
@Controller('webhooks')
export class GitHubWebhookController {
  constructor(@Inject(WebhookIntake) private readonly intake: WebhookIntake) {}

  @Post('github')
  async receive(
    @Req() request: { body?: unknown },
    @Headers('x-hub-signature-256') signature: string | undefined,
    @Headers('x-github-event') event: string | undefined,
    @Headers('x-github-delivery') deliveryId: string | undefined,
    @Res() response: HttpResponse,
  ): Promise<void> {
    const verdict = await this.intake.receive({ rawBody: Buffer.isBuffer(request.body) ? request.body : undefined, signature, event, deliveryId });
    if (verdict.kind === 'refused') {
      const error: ErrorPayload = { code: verdict.code, message: verdict.reason };
      response.status(httpStatusOf(verdict.code)).json({ ok: false, error });
      return;
    }
    response.status(202).json({ delivery: deliveryId, duplicate: verdict.duplicate });
  }
}
