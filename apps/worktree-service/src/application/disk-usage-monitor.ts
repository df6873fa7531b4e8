import { Inject, Injectable, type OnApplicationBootstrap, type OnModuleDestroy } from '@nestjs/common';
import { InjectPinoLogger, PinoLogger } from 'nestjs-pino';
import type { DiskUsage } from '@gantry/contracts';
import { Readiness } from '@gantry/service-runtime';
import { measureDiskUsage, type GitWorkspace } from '../infrastructure/git/index.js';
import { GIT_WORKSPACE } from '../infrastructure/workspace.provider.js';
import { WORKTREE_CONFIG, type WorktreeConfig } from '../infrastructure/worktree-config.js';

/**
 * Disk use of the worktree root, measured in the background (walking a large tree can take longer
 * than a readiness check may) and shown on /ready; get_disk_usage measures afresh.
 */
@Injectable()
export class DiskUsageMonitor implements OnApplicationBootstrap, OnModuleDestroy {
  private latest: DiskUsage | null = null;
  private timer: NodeJS.Timeout | null = null;
  private measuring: Promise<DiskUsage> | null = null;

  constructor(
    @Inject(GIT_WORKSPACE) private readonly workspace: GitWorkspace,
    @Inject(WORKTREE_CONFIG) private readonly config: WorktreeConfig,
    @Inject(Readiness) private readonly readiness: Readiness,
    @InjectPinoLogger('disk-usage') private readonly log: PinoLogger,
  ) {}

  onApplicationBootstrap(): void {
    this.readiness.register('disk', () => ({
      ok: true,
      detail: this.latest
        ? { root: this.latest.root, totalBytes: this.latest.totalBytes, repositories: this.latest.repositories.length, worktrees: this.latest.worktrees.length, measuredAt: this.latest.measuredAt }
        : { root: this.workspace.root, measuring: true },
    }));
    void this.measure().catch(() => undefined);
    this.timer = setInterval(() => void this.measure().catch(() => undefined), this.config.diskMeasureIntervalMs);
    this.timer.unref();
  }

  onModuleDestroy(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /** Measures now (sharing a measurement already running). */
  measure(): Promise<DiskUsage> {
    if (!this.measuring) {
      this.measuring = measureDiskUsage(this.workspace, new Date())
        .then((usage) => (this.latest = usage))
        .catch((error: unknown) => {
          this.log.warn({ error: String(error) }, 'disk use could not be measured');
          throw error;
        })
        .finally(() => {
          this.measuring = null;
        });
    }
    return this.measuring;
  }
}
