/** The pull request's events as the decider emits them: the contracts' (`data` is exactly the contract's). */
export type { PullRequestEvent, PullRequestEventType } from '@gantry/contracts';
