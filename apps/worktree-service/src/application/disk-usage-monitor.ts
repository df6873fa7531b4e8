import { Inject, Injectable, type OnApplicationBootstrap, type OnModuleDestroy } from '@nestjs/common';
import { InjectPinoLogger, PinoLogger } from 'nestjs-pino';
import type { DiskUsage } from '@gantry/contracts';
import { Readiness, Sweep } from '@gantry/service-runtime';
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
  private measuring: Promise<DiskUsage> | null = null;
  private readonly sweep: Sweep;

  constructor(
    @Inject(GIT_WORKSPACE) private readonly workspace: GitWorkspace,
    @Inject(WORKTREE_CONFIG) private readonly config: WorktreeConfig,
    @Inject(Readiness) private readonly readiness: Readiness,
    @InjectPinoLogger('disk-usage') log: PinoLogger,
  ) {
    this.sweep = new Sweep({ name: 'disk-usage', everyMs: config.diskMeasureIntervalMs, run: () => this.measure(), log });
  }

  onApplicationBootstrap(): void {
    this.readiness.register('disk', () => ({
      ok: true,
      detail: this.latest
        ? { root: this.latest.root, totalBytes: this.latest.totalBytes, repositories: this.latest.repositories.length, worktrees: this.latest.worktrees.length, measuredAt: this.latest.measuredAt }
        : { root: this.workspace.root, measuring: true },
    }));
    this.sweep.start({ now: true });
  }

  async onModuleDestroy(): Promise<void> {
    await this.sweep.stop();
  }

  /** Measures now (sharing a measurement already running). */
  measure(): Promise<DiskUsage> {
    if (!this.measuring) {
      this.measuring = measureDiskUsage(this.workspace, new Date())
        .then((usage) => (this.latest = usage))
        .finally(() => {
          this.measuring = null;
        });
    }
    return this.measuring;
  }
}
