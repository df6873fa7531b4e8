// The pure domain of job-service: deciders (initialState / decide / evolve), the finishing rule,
// the run-queue semantics, the sprint-run state machine and products. No NestJS, pg, nats or git
// here. The rules are described in docs/jobs.md (jobs, the finishing rule, attempts, the run queue,
// sprint runs), docs/domain.md (the sprint run's machine) and docs/products.md.
//
// Where each rule lives:
//   lifecycle, claims, fencing, story-log obligation  job/decider.ts (rules) + job/state.ts (evolve)   "The lifecycle", "The story log"
//   finishing table, delete-only, pushed_at           job/finishing-rule.ts  decideFinish              "The finishing rule"
//   a code job's DONE only on its reported push       job/decider.ts         requirePushedHead         "The finishing rule"
//   lease durations, max attempts, free requeues      job/lease-policy.ts                              "Leases and liveness", "Attempts"
//   rollback causes, pause before the next claim,     job/decider.ts                                   "Attempts", "A verified push is
//   verified push, cancelled run                                                                       finished, not redone", "Cancelling a running job"
//   offers on gantry.dispatch.<kind>                  job/offer.ts           jobOfferFor
//   24 h idempotency, 5 s coalescing, exclusion       run-queue/run-queue.ts routeEnqueue              "The run queue (enqueue)"
//   a coalescing key's stream of opened jobs          run-queue/coalescing.ts
//   sprint run states, pause context, resume          sprint-run/decider.ts  decideSprintRun / transitionSprintRun  "Sprint runs"
//   sprint run effects (question, enqueue, PR ready)  sprint-run/effects.ts  sprintRunEffects
//   products: repository, target branch, PR rules     product/decider.ts     decideProduct (jobs and sprint runs
//                                                      are resolved against one at creation: UNKNOWN_PRODUCT; docs/products.md)
//   a job's or sprint run's worktree lease the        product/decider.ts     unleasableLease           "Branches"
//   worktree service would refuse (leaseNamesProblem)
//   wire request → command, state → view             */requests.ts, */view.ts
//   kind defaults, configuration cascade, --effort    @gantry/contracts jobs/agent-config.ts           "Kinds and their configuration"
// Specifications: */*.spec.ts, written with DeciderSpecification.for(decider) from @gantry/eventstore/testing
// (given/when/then).

export type { JobCommand, JobCommandType, EnqueueJobData, UnderLease } from './job/commands.js';
export type { JobEvent, JobEventType } from './job/events.js';
export { isTerminalJobEvent } from './job/events.js';
export type { Job, JobState, ActiveLease, LeaseEnd, VerifiedPushRecord, StoryLog } from './job/state.js';
export { initialJobState, evolveJob, jobExists, movesTask, pauseEndOf } from './job/state.js';
export { decideJob, jobDecider } from './job/decider.js';
export type { FinishingFacts, FinishOutcome, PushRecord } from './job/finishing-rule.js';
export { decideFinish, hasNetDiff, VERIFY_DIVERGENT, VERIFY_PRODUCED_NO_OUTPUT } from './job/finishing-rule.js';
export {
  DEFAULT_MAX_ATTEMPTS,
  DEFAULT_LEASE_DURATION_MS,
  SPRINT_LEASE_DURATION_MS,
  SPRINT_LEASE_RENEW_INTERVAL_MS,
  defaultLeaseDurationMs,
  isLeaseExpired,
  freeRequeuePauseMs,
  MAX_FREE_REQUEUES,
} from './job/lease-policy.js';

export type { RunQueueEntry, RunQueueRequest, RunQueueDecision } from './run-queue/run-queue.js';
export { routeEnqueue, IDEMPOTENCY_WINDOW_MS, COALESCING_WINDOW_MS } from './run-queue/run-queue.js';
export type { CoalescingEvent, CoalescingWindows } from './run-queue/coalescing.js';
export { coalescingKeyOf, coalescingWindowOpened, evolveCoalescingWindows, initialCoalescingWindows } from './run-queue/coalescing.js';

export type { SprintConfigOverrides, SprintRunCommand, SprintRunCommandType } from './sprint-run/commands.js';
export type { SprintRunEvent } from './sprint-run/events.js';
export type { SprintRun, SprintRunState, SprintRunPause, SprintRunFailure } from './sprint-run/state.js';
export { initialSprintRunState, evolveSprintRun, sprintRunExists, remainingTasks, currentHead, passedOverHead } from './sprint-run/state.js';
export type { SprintRunEffect, SprintJobRequest } from './sprint-run/effects.js';
export { sprintRunEffects, sprintJobIdempotencyKey, nextSprintJob } from './sprint-run/effects.js';
export type { SprintRunTransition } from './sprint-run/decider.js';
export { decideSprintRun, sprintRunDecider, transitionSprintRun, resumeInstructionsFor, filesKeptOnPause, MAX_PAUSE_FILES_BYTES } from './sprint-run/decider.js';

export type { ProductCommand } from './product/commands.js';
export type { ProductEvent } from './product/events.js';
export type { Product, ProductState } from './product/state.js';
export { initialProductState, evolveProduct, productExists } from './product/state.js';
export { decideProduct, productDecider, unknownProduct } from './product/decider.js';
export type { ProductResolution } from './product/view.js';
export { productView, productResolution } from './product/view.js';

// From the wire to the deciders, and from the deciders to the read side.
export {
  enqueueRequestHash,
  enqueueJobCommand,
  coalesceIntoJobCommand,
  runQueueRequest,
  claimJobCommand,
  renewJobLeaseCommand,
  startJobCommand,
  logImplementationCommand,
  logCommitCommand,
  logTestResultCommand,
  reportPushCommand,
  finishJobCommand,
  rollbackClaimCommand,
  cancelJobCommand,
} from './job/requests.js';
export { jobView, runQueueEntry } from './job/view.js';
export { jobOfferFor, offerDueAt } from './job/offer.js';
export {
  createSprintRunCommand,
  resumeSprintRunCommand,
  cancelSprintRunCommand,
  mergeConflictCommand,
  checksFailedCommand,
  sprintRunCommandFor,
} from './sprint-run/requests.js';
export { sprintRunView } from './sprint-run/view.js';
