// The pure domain of the runner: what it decides about one claimed job — the agent's command line,
// the pre-check of the plan against the target, how the work on the branch relates to base_sha, and
// what happens once the agent has exited. No NestJS, nats, git or process handling here. The rules
// are described in docs/jobs.md (the job service's finishing rule decides DONE / SKIPPED / FAILED
// from the facts the runner reports).
//
// Where each rule lives:
//   the agent CLI's arguments, no shell; the task's session       agent-command.ts         buildAgentCommand
//     (docs/workflow-engine.md, "the task's session on the command line")
//   the prompt per job kind and the story-log duty                 prompt-templates.ts      defaultPromptTemplates
//   the pre-check: the plan already (partly) on the target          idempotency-precheck.ts  decidePrecheck
//   ALIGNED / PARTIAL / EMPTY / DIVERGENT ("Verification")          verify-classification.ts classifyVerification
//   work already on the target                                      verify-classification.ts workAlreadyOnTarget
//   after the agent exited: finish with which facts, roll back      after-agent.ts           decideAfterAgent
//     with which cause ("Attempts"), a reported failure is a
//     result, the runner's test result at a timeout ("The story
//     log"), verify then push with the facts ("A verified push is
//     finished, not redone"), a cancelled run reports its stop
//     ("Cancelling a running job"), a lost claim reports nothing
//   refusals: claim gone, a dependency's failure, a push's failure  after-agent.ts           claimGone / rollbackCauseOf /
//                                                                                             isPushFailureOfTheJob
//   an acquire whose lease ended, with its claim or not              after-agent.ts           acquireRefusal
//     (docs/worktrees.md, "An acquire whose lease ended")
// Specifications: *.spec.ts beside each file; after-agent.spec.ts is a table, one row per case.

export * from './agent-command.js';
export * from './prompt-templates.js';
export * from './verify-classification.js';
export * from './idempotency-precheck.js';
export * from './after-agent.js';
