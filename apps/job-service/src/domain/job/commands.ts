import type {
  AgentConfigOverride,
  AgentProfile,
  JobKind,
  JobPayload,
  RollbackCause,
  TestResultStatus,
  VerificationFacts,
} from '@gantry/contracts';

import type { ProductResolution } from '../product/view.js';

/**
 * The job's commands as the decider takes them. Time (`now`, ISO-8601) and ids come in here:
 * the application layer reads its clock and makes the uuid, the decider never does.
 */

/** Who acts under a claim: the holder's runner id and its fencing token. */
export interface UnderLease {
  jobId: string;
  runnerId: string;
  leaseToken: number;
  now: string;
}

export interface EnqueueJobData {
  jobId: string;
  kind: JobKind;
  productId: string;
  storyId: string | null;
  sprintId: string | null;
  sprintRunId: string | null;
  taskId: string | null;
  prompt: string | null;
  payload: JobPayload | null;
  configOverrides: { product: AgentConfigOverride | null; sprint: AgentConfigOverride | null; job: AgentConfigOverride | null };
  agentProfile: AgentProfile | null;
  reason: string | null;
  excludeFromCoalescing: boolean;
  idempotencyKey: string;
  requestHash: string;
  baseRef: string | null;
  /** The branch the work is pushed to (see `workBranchOf`). */
  branch: string | null;
  storyTaskIds: string[] | null;
  /** The job's product as registered now; null when it is not registered (the enqueue is refused). */
  product: ProductResolution | null;
  maxAttempts: number;
  now: string;
}

export type JobCommand =
  | { type: 'EnqueueJob'; data: EnqueueJobData }
  | {
      type: 'CoalesceIntoJob';
      /** `branch`: the one the request names (the job keeps its own); refused as an enqueue's would be. */
      data: { jobId: string; payload: JobPayload | null; prompt: string | null; branch: string | null; idempotencyKey: string; requestHash: string; now: string };
    }
  | {
      type: 'ClaimJob';
      data: {
        jobId: string;
        runnerId: string;
        kinds: JobKind[];
        baseSha: string | null;
        /** null: the kind's default (`defaultLeaseDurationMs`). */
        leaseDurationMs: number | null;
        now: string;
      };
    }
  | { type: 'RenewJobLease'; data: UnderLease & { leaseDurationMs: number | null } }
  | {
      type: 'StartJob';
      /**
       * `adoptPushOf`: the lease token of the claim whose verified push this attempt only finishes;
       * `adoptRunOf`: of the earlier unfinished claim whose pushed work it takes over and finishes.
       */
      data: UnderLease & { baseSha: string | null; branch: string | null; adoptPushOf: number | null; adoptRunOf?: number | null };
    }
  | {
      type: 'LogImplementation';
      data: UnderLease & {
        taskId: string | null;
        branch: string | null;
        plan: string | null;
        summary: string;
        alreadyPresent: { extent: 'FULL' | 'PARTIAL'; commitSha: string } | null;
      };
    }
  | { type: 'LogCommit'; data: UnderLease & { commitSha: string; message: string; summary: string } }
  | { type: 'LogTestResult'; data: UnderLease & { status: TestResultStatus; summary: string } }
  | { type: 'ReportPush'; data: UnderLease & { branch: string; headSha: string; pushed: boolean; facts: VerificationFacts | null } }
  | { type: 'FinishJob'; data: UnderLease & { facts: VerificationFacts } }
  | { type: 'RollbackClaim'; data: UnderLease & { reason: string; exitCode: number | null; cause: RollbackCause } }
  /** From job-service's own expiry sweep: expire exactly this grant, if its time has come. */
  | { type: 'ExpireJobLease'; data: { jobId: string; leaseToken: number; now: string } }
  /**
   * From a job service at its start, before it serves or sweeps: this grant runs as long again from
   * now, since no runner could renew it while no job service ran (docs/jobs.md, "A job service outage").
   */
  /** `after`: what kept the runners from renewing — no job service ran (`start`), or this one had lost NATS (`bus_loss`). */
  /**
   * `lastSweptAt`: the latest lease sweep any job service made with its bus up — the moment serving
   * stopped, as far as the service can tell (null: none recorded).
   */
  | { type: 'ResumeJobLease'; data: { jobId: string; leaseToken: number; now: string; after?: 'start' | 'bus_loss'; lastSweptAt?: string | null } }
  | { type: 'CancelJob'; data: { jobId: string; reason: string | null; now: string } }
  /** From the pr-service: the checks of the head this job pushed are red. */
  | {
      type: 'RecordChecksFailed';
      /** `failedChecksLeftOut`: the failed checks the pr-service's event counts but does not name (docs/pr-service.md, "How large its events and answers may be"). */
      data: { jobId: string; headSha: string; prUrl: string; failedChecks: string[]; failedChecksLeftOut?: number; now: string };
    };

export type JobCommandType = JobCommand['type'];
