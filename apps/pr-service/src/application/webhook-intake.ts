import { Inject, Injectable, type BeforeApplicationShutdown, type OnApplicationBootstrap, type OnModuleInit } from '@nestjs/common';
import { InjectPinoLogger, PinoLogger } from 'nestjs-pino';
import { Webhooks } from '@octokit/webhooks';
import { ErrorCode } from '@gantry/contracts';
import { deleteInBatches, EventStore, storableValue } from '@gantry/eventstore';
import { RetentionPruner, type RetentionPass } from '@gantry/service-runtime';
import type { PrServiceConfig } from '../infrastructure/pr-service-config.js';
import { KeyedRuns } from './keyed-runs.js';
import { PullRequestLog } from './pull-request-log.js';
import { PullRequestReconciler } from './reconciler.js';
import { PR_SERVICE_CONFIG } from './tokens.js';
import { whatADeliveryConcerns } from './webhook-targets.js';

/** Rows per DELETE, and DELETEs in one pass of the pruning job. */
const PRUNE_BATCH_SIZE = 1000;
const PRUNE_MAX_BATCHES = 50;
/** The wait before a delivery whose processing failed is processed again: 1 s, doubling up to 30 s. */
const REPROCESS_FIRST_MS = 1000;
const REPROCESS_MAX_MS = 30_000;

/** A refusal: 401 (UNAUTHENTICATED) for a missing or wrong signature, 400 (INVALID_COMMAND) for a signed body that is no delivery. */
export type DeliveryVerdict = { kind: 'recorded'; duplicate: boolean } | { kind: 'refused'; code: typeof ErrorCode.UNAUTHENTICATED | typeof ErrorCode.INVALID_COMMAND; reason: string };

/**
 * GitHub's webhooks (docs/pr-service.md, PR-12). A delivery is verified over its raw bytes with
 * `@octokit/webhooks` (every configured secret is tried, so a secret can be rotated), recorded once by
 * its X-GitHub-Delivery (a redelivery carries the same id and is recorded once), and answered; it is
 * processed after the answer — and again, 1 s to 30 s later, when its processing failed (or at once when it is redelivered meanwhile). Processing never trusts the delivery's content or its order: it only
 * names the pull requests concerned, which are then read from GitHub again.
 */
@Injectable()
export class WebhookIntake implements OnModuleInit, OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly verifiers: Webhooks[];
  private readonly processing: KeyedRuns;
  /** How often the processing of each delivery failed in a row, for the wait before it is tried again. */
  private readonly failures = new Map<string, number>();

  constructor(
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(PullRequestLog) private readonly prs: PullRequestLog,
    @Inject(PullRequestReconciler) private readonly reconciler: PullRequestReconciler,
    @Inject(PR_SERVICE_CONFIG) config: PrServiceConfig,
    @Inject(RetentionPruner) private readonly pruner: RetentionPruner,
    @InjectPinoLogger('webhooks') private readonly log: PinoLogger,
  ) {
    this.verifiers = config.webhookSecrets.map((secret) => new Webhooks({ secret }));
    this.processing = new KeyedRuns(4, (id) => this.process(id), (id, error) => {
      // The delivery is recorded and its content storable: what failed is the database (away a moment, or the
      // pool busy under load). GitHub sends a delivery once, so it is processed again here, not left for a
      // "Redeliver" or a restart.
      const failures = (this.failures.get(id) ?? 0) + 1;
      this.failures.set(id, failures);
      const retryInMs = Math.min(REPROCESS_FIRST_MS * 2 ** (failures - 1), REPROCESS_MAX_MS);
      this.log.warn({ deliveryId: id, error: String(error), failures, retryInMs }, 'processing a delivery failed; it is processed again later');
      this.processing.ask(id, retryInMs);
    });
  }

  /**
   * What came in over HTTP, as its bytes: verified first — nothing of a body unsigned or wrongly signed is
   * parsed — then recorded (or refused with nothing recorded).
   */
  async receive(request: { rawBody: Buffer | undefined; signature: string | undefined; event: string | undefined; deliveryId: string | undefined }): Promise<DeliveryVerdict> {
    if (!request.signature) return { kind: 'refused', code: ErrorCode.UNAUTHENTICATED, reason: 'the delivery carries no X-Hub-Signature-256' };
    const body = request.rawBody?.toString('utf8') ?? '';
    if (body === '' || !(await this.verified(body, request.signature))) return { kind: 'refused', code: ErrorCode.UNAUTHENTICATED, reason: 'the signature does not match the body under any configured secret' };
    if (!request.deliveryId || !request.event) return { kind: 'refused', code: ErrorCode.INVALID_COMMAND, reason: 'a delivery names its X-GitHub-Event and X-GitHub-Delivery' };
    let parsed: unknown;
    try {
      parsed = parsedPayload(body);
    } catch {
      return { kind: 'refused', code: ErrorCode.INVALID_COMMAND, reason: 'the body is not JSON' };
    }
    // Every GitHub delivery is an object; `null`, an array, a number or a string is no delivery of any event.
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) return { kind: 'refused', code: ErrorCode.INVALID_COMMAND, reason: 'the body is not a JSON object' };
    const payload = parsed as { action?: unknown } & Record<string, unknown>;
    const { rowCount } = await this.store.pool.query(
      `INSERT INTO webhook_deliveries (delivery_id, event, action, payload) VALUES ($1, $2, $3, $4) ON CONFLICT (delivery_id) DO NOTHING`,
      [request.deliveryId.slice(0, 200), request.event.slice(0, 100), typeof payload.action === 'string' ? payload.action.slice(0, 100) : null, body],
    );
    const duplicate = rowCount === 0;
    const deliveryId = request.deliveryId.slice(0, 200);
    if (!duplicate) {
      // Only the id waits in memory; processing reads the body back from its row. Deliveries pile up while
      // processing is held up (the database slow, GitHub still delivering), and one body may be 25 MB.
      setImmediate(() => this.processing.ask(deliveryId));
    } else {
      // A delivery counts as seen once it was processed: GitHub's "Redeliver" is pressed after something
      // went wrong, and a recorded delivery whose processing failed is processed again (from its row).
      const { rows } = await this.store.pool.query(`SELECT 1 FROM webhook_deliveries WHERE delivery_id = $1 AND processed_at IS NULL`, [deliveryId]);
      if (rows.length > 0) setImmediate(() => this.processing.ask(deliveryId));
    }
    return { kind: 'recorded', duplicate };
  }

  private async verified(body: string, signature: string): Promise<boolean> {
    for (const verifier of this.verifiers) {
      try {
        if (await verifier.verify(body, signature)) return true;
      } catch {
        // A malformed signature header is no match.
      }
    }
    return false;
  }

  onModuleInit(): void {
    this.pruner.register('webhook-deliveries', (pass) => this.prune(pass));
  }

  /**
   * Processed deliveries go once the receipt window has passed since (GANTRY_RECEIPT_TTL_MS, 7 days:
   * longer than GitHub offers a delivery's redelivery). One redelivered later is recorded and processed
   * again, which asks for reads of its pull requests and changes nothing else. An unprocessed one stays.
   */
  async prune(pass: RetentionPass): Promise<{ webhookDeliveries: number }> {
    const before = new Date(pass.now.getTime() - pass.receiptTtlMs);
    const webhookDeliveries = await deleteInBatches(pass.pool, 'webhook_deliveries', 'processed_at < $1', [before], PRUNE_BATCH_SIZE, PRUNE_MAX_BATCHES);
    return { webhookDeliveries };
  }

  async onApplicationBootstrap(): Promise<void> {
    // Recorded before a crash and not processed: processed now.
    const { rows } = await this.store.pool.query<{ delivery_id: string }>(`SELECT delivery_id FROM webhook_deliveries WHERE processed_at IS NULL ORDER BY received_at`);
    for (const row of rows) this.processing.ask(row.delivery_id);
  }

  async beforeApplicationShutdown(): Promise<void> {
    await this.processing.stop();
  }

  private async process(deliveryId: string): Promise<void> {
    const { rows } = await this.store.pool.query<{ event: string; payload: string }>(
      `SELECT event, payload FROM webhook_deliveries WHERE delivery_id = $1 AND processed_at IS NULL`,
      [deliveryId],
    );
    const row = rows[0] && { event: rows[0].event, payload: parsedPayload(rows[0].payload) };
    if (!row) {
      this.failures.delete(deliveryId);
      return;
    }
    const concerns = whatADeliveryConcerns(row.event, row.payload);
    const ids = concerns ? await this.prs.idsFor(concerns.repository, concerns) : [];
    for (const id of ids) this.reconciler.ask(id);
    const outcome = concerns === null ? 'ignored' : ids.length === 0 ? 'no tracked pull request' : `read again: ${ids.length}`;
    await this.store.pool.query(`UPDATE webhook_deliveries SET processed_at = now(), outcome = $2 WHERE delivery_id = $1 AND processed_at IS NULL`, [deliveryId, outcome]);
    this.failures.delete(deliveryId);
    this.log.info({ deliveryId, event: row.event, outcome }, 'delivery processed');
  }
}

/**
 * A delivery's body as processing reads it: its strings as PostgreSQL can keep them (`storableValue`:
 * a NUL or a lone surrogate becomes U+FFFD). A signed body's content is not trusted (PR-12), and a
 * NUL in its action, repository, branch or SHA made the insert fail (a 500) or the look-up of the
 * PRs it names fail on every attempt, leaving the delivery unprocessed for good.
 */
function parsedPayload(body: string): unknown {
  return storableValue(JSON.parse(body) as unknown);
}
