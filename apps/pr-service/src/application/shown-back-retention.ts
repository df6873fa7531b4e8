import { Inject, Injectable, type OnModuleInit } from '@nestjs/common';
import { RetentionPruner, type RetentionPass } from '@gantry/service-runtime';
import { SHOWN_BACK_READ_GAP_MS } from '../domain/index.js';
import { pruneShownBack } from '../infrastructure/persistence/shown-back-retention.js';

/** Rows per DELETE, and DELETEs in one pass of the pruning job. */
const BATCH_SIZE = 1000;
const MAX_BATCHES = 50;

/**
 * Prunes `pull_request_shown_back` on the service's pruning job (RetentionPruner): the row of a pull request that
 * settled, or whose last read showing it back is more than twice SHOWN_BACK_READ_GAP_MS old — the next read showing it
 * back starts the wait again either way (docs/pr-service.md, PR-15). The margin is for the pruning replica's clock
 * against the database's, which wrote the row; a row deleted too early only starts a wait again, so a head or base
 * shown back is followed later, never sooner.
 */
@Injectable()
export class ShownBackRetention implements OnModuleInit {
  constructor(@Inject(RetentionPruner) private readonly pruner: RetentionPruner) {}

  onModuleInit(): void {
    this.pruner.register('pr-service-shown-back', (pass) => this.prune(pass));
  }

  async prune(pass: RetentionPass): Promise<{ pullRequestShownBack: number }> {
    const readBefore = new Date(pass.now.getTime() - 2 * SHOWN_BACK_READ_GAP_MS);
    return { pullRequestShownBack: await pruneShownBack(pass.pool, { readBefore, batchSize: BATCH_SIZE, maxBatches: MAX_BATCHES }) };
  }
}
