import { Module } from '@nestjs/common';
import { PinoLogger } from 'nestjs-pino';
import { componentLogger, GantryRuntimeModule } from '@gantry/service-runtime';
import { GitHubRateLimitHold } from './application/github-rate-limit.js';
import { JobFacts } from './application/job-facts.js';
import { JobScopesRetention } from './application/job-scopes-retention.js';
import { PullRequestCommandHandlers } from './application/pull-request-commands.js';
import { PullRequestLog } from './application/pull-request-log.js';
import { PullRequestEffectsConsumer, PullRequestReconciler } from './application/reconciler.js';
import { CONFLICTING_FILES, GITHUB_PULL_REQUESTS, PR_SERVICE_CONFIG } from './application/tokens.js';
import { ShownBackRetention } from './application/shown-back-retention.js';
import { WebhookIntake } from './application/webhook-intake.js';
import { ConflictingFiles } from './infrastructure/git/conflicting-files.js';
import { createOctokit } from './infrastructure/github/octokit.js';
import { OctokitPullRequests } from './infrastructure/github/octokit-pull-requests.js';
import { GitHubWebhookController } from './infrastructure/http/github-webhook.controller.js';
import { prServiceSettings, type PrServiceConfig } from './infrastructure/pr-service-config.js';
import { prServiceMigrations } from './infrastructure/persistence/migrations.js';
import { prServiceProjections } from './infrastructure/persistence/projections.js';
import { PullRequestLocks } from './infrastructure/persistence/pull-request-locks.js';

@Module({
  imports: [
    GantryRuntimeModule.forRoot({
      service: 'pr-service',
      context: 'prs',
      defaultPort: 3103,
      migrations: prServiceMigrations,
      projections: prServiceProjections,
      settings: [prServiceSettings],
    }),
  ],
  controllers: [GitHubWebhookController, PullRequestCommandHandlers, JobFacts, PullRequestEffectsConsumer],
  providers: [
    {
      provide: GITHUB_PULL_REQUESTS,
      inject: [PR_SERVICE_CONFIG, PinoLogger],
      useFactory: (config: PrServiceConfig, logger: PinoLogger) => new OctokitPullRequests(createOctokit(config, componentLogger(logger, 'github'))),
    },
    { provide: CONFLICTING_FILES, inject: [PR_SERVICE_CONFIG], useFactory: (config: PrServiceConfig) => new ConflictingFiles({ gitDir: config.gitDir, timeoutMs: config.gitTimeoutMs }) },
    PullRequestLog,
    GitHubRateLimitHold,
    PullRequestLocks,
    PullRequestReconciler,
    WebhookIntake,
    JobScopesRetention,
    ShownBackRetention,
  ],
})
export class AppModule {}

/** GitHub signs a webhook over its exact bytes, and sends bodies up to 25 MB: the route reads them unparsed. */
export const prServiceRawBodyRoutes = [{ path: '/webhooks/github', limit: '25mb' }];
