import { Module } from '@nestjs/common';
import { GantryRuntimeModule } from '@gantry/service-runtime';
import { DiskUsageMonitor } from './application/disk-usage-monitor.js';
import { WorktreeEffectProcessor } from './application/effect-processor.js';
import { WorktreeHygiene } from './application/hygiene.js';
import { JobLifecycleConsumer, JobLifecycleReactions } from './application/job-lifecycle.js';
import { JobStatusesRetention } from './application/job-statuses-retention.js';
import { WorktreeLeaseLog } from './application/lease-log.js';
import { LeaseReleases } from './application/lease-releases.js';
import { LeaseSweep } from './application/lease-sweep.js';
import { WorktreeRecovery } from './application/recovery.js';
import { WorktreeLeaseCommands } from './application/worktree-commands.js';
import { WorktreeQueries } from './application/worktree-queries.js';
import { worktreeServiceMigrations } from './infrastructure/persistence/migrations.js';
import { worktreeServiceProjections } from './infrastructure/persistence/projections.js';
import { worktreeInfrastructure } from './infrastructure/workspace.provider.js';
import { worktreeSettings } from './infrastructure/worktree-config.js';

@Module({
  imports: [
    GantryRuntimeModule.forRoot({
      service: 'worktree-service',
      context: 'worktrees',
      defaultPort: 3104,
      migrations: worktreeServiceMigrations,
      projections: worktreeServiceProjections,
      settings: [worktreeSettings],
    }),
  ],
  providers: [
    ...worktreeInfrastructure,
    WorktreeLeaseLog,
    WorktreeHygiene,
    WorktreeEffectProcessor,
    LeaseReleases,
    JobLifecycleReactions,
    LeaseSweep,
    DiskUsageMonitor,
    WorktreeRecovery,
    JobStatusesRetention,
  ],
  // Entry points: commands (@CommandHandler) and durable consumers (@DurableConsumer).
  controllers: [WorktreeLeaseCommands, WorktreeQueries, JobLifecycleConsumer],
})
export class AppModule {}
