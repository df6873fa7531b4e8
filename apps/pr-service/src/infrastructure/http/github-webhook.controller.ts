import { Controller, Headers, Inject, Post, Req, Res } from '@nestjs/common';
import type { RawBodyRequest } from '@nestjs/common';
import { WebhookIntake } from '../../application/webhook-intake.js';

interface HttpResponse {
  status(code: number): HttpResponse;
  json(body: unknown): void;
}

/** `POST /webhooks/github`: answered as soon as the delivery is recorded (GitHub waits 10 s at most); processed after. */
@Controller('webhooks')
export class GitHubWebhookController {
  constructor(@Inject(WebhookIntake) private readonly intake: WebhookIntake) {}

  @Post('github')
  async receive(
    @Req() request: RawBodyRequest<unknown>,
    @Headers('x-hub-signature-256') signature: string | undefined,
    @Headers('x-github-event') event: string | undefined,
    @Headers('x-github-delivery') deliveryId: string | undefined,
    @Res() response: HttpResponse,
  ): Promise<void> {
    const verdict = await this.intake.receive({ rawBody: request.rawBody, signature, event, deliveryId });
    if (verdict.kind === 'refused') {
      response.status(verdict.status).json({ error: verdict.reason });
      return;
    }
    response.status(202).json({ delivery: deliveryId, duplicate: verdict.duplicate });
  }
}
