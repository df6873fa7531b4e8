import { createAppAuth } from '@octokit/auth-app';
import { retry } from '@octokit/plugin-retry';
import { throttling } from '@octokit/plugin-throttling';
import { Octokit } from '@octokit/rest';
import type { PrServiceConfig } from '../pr-service-config.js';

export interface GitHubLog {
  log(message: string, fields: Record<string, unknown>): void;
  warn(message: string, fields: Record<string, unknown>): void;
  error(message: string, fields: Record<string, unknown>): void;
}

export const GantryOctokit = Octokit.plugin(retry, throttling);
export type GantryOctokit = InstanceType<typeof GantryOctokit>;

/**
 * 405 (not mergeable) and 409 (head moved) are answers, not hiccups: retried, a merge would be sent
 * again for about 14 s before the machine hears GitHub's verdict. 429 is a rate limit (GitHub answers
 * either limit with 403 or 429), the throttling plugin's to handle (a secondary one waited out, `retry-after`); the retry
 * plugin, not told, sent it again after 1, 4 and 9 s inside each of the throttling plugin's attempts —
 * more requests while limited, which GitHub may answer by banning the integration. The rest of the
 * list is the retry plugin's own default.
 */
export const DO_NOT_RETRY = [400, 401, 403, 404, 405, 409, 410, 422, 429, 451];

/**
 * The one Octokit of the service: GitHub's REST API with the retry plugin (5xx and network errors,
 * with growing waits) and the throttling plugin (GitHub's pacing of writes, and the secondary
 * rate limit: the request waits `retry-after` — or, without one, the configured wait — and is sent
 * again, up to `rateLimitRetries` times). The primary rate limit is not waited out here: it lasts
 * until its reset, up to an hour, and a request waiting that long would hold its run's database
 * connection and run slot; it fails at once, and the reconciler runs the PR again at the reset.
 * `octokit.graphql` shares all of it.
 */
export function createOctokit(config: PrServiceConfig, log: GitHubLog): GantryOctokit {
  const onLimit = (kind: 'primary' | 'secondary') => (retryAfter: number, options: { method?: string; url?: string }, _o: unknown, retryCount: number) => {
    const retrying = kind === 'secondary' && retryCount < config.rateLimitRetries;
    log.warn(retrying ? 'GitHub rate limit: waiting before the request is sent again' : 'GitHub rate limit: the request fails', {
      kind,
      method: options.method,
      url: options.url,
      retryAfterSeconds: retryAfter,
      retryCount,
      retrying,
    });
    return retrying;
  };
  const auth =
    config.auth === null
      ? {}
      : config.auth.kind === 'token'
        ? { auth: config.auth.token }
        : { authStrategy: createAppAuth, auth: { appId: config.auth.appId, privateKey: config.auth.privateKey, installationId: config.auth.installationId } };
  return new GantryOctokit({
    ...auth,
    baseUrl: config.apiUrl,
    userAgent: 'gantry-pr-service',
    retry: { doNotRetry: DO_NOT_RETRY },
    throttle: {
      fallbackSecondaryRateRetryAfter: config.secondaryRateLimitWaitS,
      onRateLimit: onLimit('primary'),
      onSecondaryRateLimit: onLimit('secondary'),
    },
    // Octokit's own lines (deprecations, plugin notes): structured, and never with credentials in them.
    log: {
      debug: () => undefined,
      info: () => undefined,
      warn: (message: string) => log.warn('octokit', { note: message }),
      error: (message: string) => log.error('octokit', { note: message }),
    },
  });
}
