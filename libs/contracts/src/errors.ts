import { z } from 'zod';

/** Every error that crosses a process boundary carries one of these codes. */
export const ErrorCode = {
  INVALID_COMMAND: 'INVALID_COMMAND',
  /**
   * The caller did not prove who it is: no or a wrong bearer token on a service's guarded routes, no or a
   * wrong signature on a GitHub webhook (answered 401 over HTTP; docs/operations.md, "Failures over HTTP").
   */
  UNAUTHENTICATED: 'UNAUTHENTICATED',
  VERSION_CONFLICT: 'VERSION_CONFLICT',
  IDEMPOTENCY_CONFLICT: 'IDEMPOTENCY_CONFLICT',
  STALE_FENCE: 'STALE_FENCE',
  NOT_FOUND: 'NOT_FOUND',
  /** A job or sprint run names a product that was never registered (register_product). */
  UNKNOWN_PRODUCT: 'UNKNOWN_PRODUCT',
  ALREADY_CLAIMED: 'ALREADY_CLAIMED',
  INVALID_TRANSITION: 'INVALID_TRANSITION',
  PRECONDITION_FAILED: 'PRECONDITION_FAILED',
  LOCK_TIMEOUT: 'LOCK_TIMEOUT',
  TIMEOUT: 'TIMEOUT',
  UNAVAILABLE: 'UNAVAILABLE',
  INTERNAL: 'INTERNAL',
  /**
   * The command was handled — it succeeded, and anything it did is done — but its answer is larger
   * than the bus carries; `details.succeeded` is true (docs/architecture.md, "Answers too large for the bus").
   */
  REPLY_TOO_LARGE: 'REPLY_TOO_LARGE',
  // How an effect on GitHub failed (docs/pr-service.md).
  /** The head's checks are red. */
  CHECKS_FAILED: 'CHECKS_FAILED',
  /** The pull request conflicts with its base (or GitHub refuses the merge as not mergeable). */
  MERGE_CONFLICT: 'MERGE_CONFLICT',
  /** GitHub refused the credentials or their permissions. */
  GH_AUTH_ERROR: 'GH_AUTH_ERROR',
  /** The repository does not allow auto-merge. */
  AUTO_MERGE_NOT_ALLOWED: 'AUTO_MERGE_NOT_ALLOWED',
  /** GitHub's primary rate limit is used up until its reset (`details.rateLimitResetAt`): nothing is asked of GitHub before then. */
  GH_RATE_LIMITED: 'GH_RATE_LIMITED',
  /** GitHub failed in a way none of the codes above names. */
  UNKNOWN: 'UNKNOWN',
} as const;
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

export const ErrorCodeSchema = z.enum(Object.values(ErrorCode) as [ErrorCode, ...ErrorCode[]]);

export const ValidationIssueSchema = z.object({
  path: z.array(z.union([z.string(), z.number()])),
  message: z.string(),
  code: z.string().optional(),
});
export type ValidationIssue = z.infer<typeof ValidationIssueSchema>;

export const ErrorPayloadSchema = z.object({
  code: ErrorCodeSchema,
  message: z.string(),
  issues: z.array(ValidationIssueSchema).optional(),
  details: z.record(z.string(), z.unknown()).optional(),
});
export type ErrorPayload = z.infer<typeof ErrorPayloadSchema>;

/** A typed, expected failure: a refusal with a code and a human sentence. Never carries secrets. */
export class GantryError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly details?: Record<string, unknown>,
    readonly issues?: ValidationIssue[],
  ) {
    super(message);
    this.name = 'GantryError';
  }

  toPayload(): ErrorPayload {
    return {
      code: this.code,
      message: this.message,
      ...(this.issues ? { issues: this.issues } : {}),
      ...(this.details ? { details: this.details } : {}),
    };
  }

  static fromPayload(payload: ErrorPayload): GantryError {
    return new GantryError(payload.code, payload.message, payload.details, payload.issues);
  }
}

export function isGantryError(value: unknown): value is GantryError {
  return value instanceof GantryError;
}

export function issuesOf(error: z.ZodError): ValidationIssue[] {
  return error.issues.map((issue) => ({
    path: issue.path.map((p) => (typeof p === 'symbol' ? String(p) : p)),
    message: issue.message,
    code: issue.code,
  }));
}

export function invalidCommand(error: z.ZodError, what = 'command'): GantryError {
  const issues = issuesOf(error);
  const summary = issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ');
  return new GantryError(ErrorCode.INVALID_COMMAND, `invalid ${what}: ${summary}`, undefined, issues);
}
