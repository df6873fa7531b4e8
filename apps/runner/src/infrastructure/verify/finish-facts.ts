import type { AlreadyPresentSchema, VerificationFacts } from '@gantry/contracts';
import type { z } from 'zod';
import { verifiedFacts } from '../../domain/after-agent.js';
import type { PrecheckResult } from '../../domain/idempotency-precheck.js';
import type { VerificationReport } from './verify-worktree.js';

/** The `finish_job` facts (@gantry/contracts) from a verification report and how the run ended (the rule: domain/after-agent.ts). */
export function finishFacts(
  report: VerificationReport,
  outcome: { failure: VerificationFacts['failure']; cancelled: boolean },
): VerificationFacts {
  return { ...verifiedFacts(report, outcome.failure), cancelled: outcome.cancelled };
}

/** The `alreadyPresent` field of `log_implementation`, from the pre-check; null when nothing was found. */
export function alreadyPresent(precheck: PrecheckResult): z.infer<typeof AlreadyPresentSchema> | null {
  switch (precheck.kind) {
    case 'already_done':
      return { extent: 'FULL', commitSha: precheck.commit };
    case 'partial':
      return { extent: 'PARTIAL', commitSha: precheck.commit };
    case 'not_started':
      return null;
  }
}
