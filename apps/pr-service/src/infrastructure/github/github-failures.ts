import { ErrorCode, GantryError } from '@gantry/contracts';

/** What a failed GitHub request looked like: its status (REST) and GitHub's message, or GraphQL's error entries. */
interface FailedRequest {
  status?: number;
  message?: string;
  response?: { headers?: Record<string, string | number | undefined>; data?: { message?: string; errors?: { message?: string; type?: string }[] } };
  errors?: { message?: string; type?: string }[];
}

/** GitHub's own words for the failure (REST message, 422 error entries, or GraphQL errors); never a header, never a token. */
export function gitHubMessage(error: unknown): string {
  const e = error as FailedRequest;
  const entries = e.errors ?? e.response?.data?.errors ?? [];
  const parts = [e.response?.data?.message, ...entries.map((x) => x.message)].filter((m): m is string => typeof m === 'string' && m !== '');
  const text = parts.length > 0 ? [...new Set(parts)].join(': ') : (e.message ?? String(error));
  return text.slice(0, 1000);
}

/**
 * GraphQL answers a permission the token or the App lacks with 200 and an error whose type says so:
 * FORBIDDEN ("Resource not accessible by integration" for an App, "… by personal access token" for a
 * fine-grained token), INSUFFICIENT_SCOPES (a classic token without the scope). No status to go by.
 */
function deniedByGraphQL(error: unknown): boolean {
  const e = error as FailedRequest;
  return (e.errors ?? e.response?.data?.errors ?? []).some((x) => x.type === 'FORBIDDEN' || x.type === 'INSUFFICIENT_SCOPES');
}

/**
 * GitHub answers 404 alike for what does not exist and for what the token or the App may not see ("Requests that
 * require authentication will return 404 Not Found, instead of 403 Forbidden, in some places", to keep private
 * repositories private); GraphQL says NOT_FOUND ("Could not resolve to a node …") with 200. The pr-service only asks
 * about repositories its products name and pull requests GitHub gave it, so either way a person must act.
 */
function notVisible(error: unknown): boolean {
  const e = error as FailedRequest;
  return statusOf(error) === 404 || (e.errors ?? e.response?.data?.errors ?? []).some((x) => x.type === 'NOT_FOUND');
}

/**
 * GitHub refusing the merge method the repository's settings do not allow: GraphQL's "Merge method squash is
 * not allowed on this repository" (auto-merge), REST's 405 "Squash merges are not allowed on this repository."
 * (and "Merge commits …", "Rebase merges …"). A setting a person must change, not a failure to send again.
 */
export function isMergeMethodRefusal(message: string): boolean {
  return /merge method \w+ is not allowed|(merge commits|squash merges|rebase merges) are not allowed/i.test(message);
}

/**
 * GitHub's primary rate limit used up: REST 403 or 429 with `x-ratelimit-remaining: 0`, GraphQL an error of type
 * RATE_LIMITED (with 200); either way `x-ratelimit-reset` says when it is lifted (epoch seconds). When, or null for
 * any other failure — a secondary limit names no reset, and is waited out as GitHub asks (`retry-after`).
 */
export function rateLimitResetOf(error: unknown): Date | null {
  const e = error as FailedRequest;
  const headers = e.response?.headers ?? {};
  const limited =
    ((statusOf(error) === 403 || statusOf(error) === 429) && String(headers['x-ratelimit-remaining']) === '0') ||
    (e.errors ?? e.response?.data?.errors ?? []).some((x) => x.type === 'RATE_LIMITED');
  const reset = Number(headers['x-ratelimit-reset']);
  if (!limited || !Number.isFinite(reset) || reset <= 0) return null;
  return new Date(reset * 1000);
}

export function statusOf(error: unknown): number | undefined {
  const status = (error as FailedRequest).status;
  return typeof status === 'number' ? status : undefined;
}

/**
 * A failed GitHub request as a typed failure (docs/pr-service.md): refused credentials or
 * permissions, and a 404 (GitHub's answer for what the token may not see), are GH_AUTH_ERROR, the primary rate limit used up GH_RATE_LIMITED, a 405 "not mergeable" is MERGE_CONFLICT and a 405 naming failing
 * required checks CHECKS_FAILED; the rest — other refusals, 5xx after the retries, anything
 * unforeseen — UNKNOWN. The HTTP status stays in the details.
 */
export function gitHubFailure(error: unknown, what: string): GantryError {
  if (error instanceof GantryError) return error;
  const status = statusOf(error);
  const message = gitHubMessage(error);
  const details = { status: status ?? null, githubMessage: message };
  const resetAt = rateLimitResetOf(error);
  if (resetAt) {
    // With the reset the next run waits for.
    return new GantryError(ErrorCode.GH_RATE_LIMITED, `GitHub's rate limit is used up until ${resetAt.toISOString()}; could not ${what}: ${message}`, {
      ...details,
      rateLimitResetAt: resetAt.toISOString(),
    });
  }
  if (status === 401 || (status === 403 && !/rate limit/i.test(message)) || deniedByGraphQL(error) || /Resource not accessible by|Bad credentials|not been granted the required scopes/i.test(message)) {
    return new GantryError(ErrorCode.GH_AUTH_ERROR, `GitHub refused the credentials for ${what}: ${message}`, details);
  }
  if (notVisible(error)) {
    return new GantryError(
      ErrorCode.GH_AUTH_ERROR,
      `GitHub could not ${what}: ${message} — its answer both for a private repository the token or App cannot see and for a repository or pull request that does not exist`,
      details,
    );
  }
  if (status === 405) {
    // GitHub's 405 says "not mergeable" for a conflict; it names required checks, reviews, drafts and merge methods in its own words.
    if (/status check|checks? .*(failing|expected)/i.test(message)) return new GantryError(ErrorCode.CHECKS_FAILED, `GitHub will not ${what}: ${message}`, details);
    if (/not mergeable|conflict/i.test(message)) return new GantryError(ErrorCode.MERGE_CONFLICT, `GitHub will not ${what}: ${message}`, details);
    return new GantryError(ErrorCode.UNKNOWN, `GitHub will not ${what}: ${message}`, details);
  }
  if (/auto ?merge is not allowed/i.test(message)) return new GantryError(ErrorCode.AUTO_MERGE_NOT_ALLOWED, `GitHub will not ${what}: ${message}`, details);
  return new GantryError(ErrorCode.UNKNOWN, `GitHub failed to ${what}: ${message}`, details);
}
