import { Inject, Injectable, type OnApplicationShutdown } from '@nestjs/common';
import { Counter, Gauge, register } from 'prom-client';
import { EventStore } from '@gantry/eventstore';

/** How long a replica goes by the hold it last read before it reads the table again. */
const READ_EVERY_MS = 1000;

/** The holds of this process (one, but in tests): the gauge shows the latest. */
const holds = new Set<GitHubRateLimitHold>();

const limited =
  (register.getSingleMetric('gantry_pr_github_rate_limited_total') as Counter | undefined) ??
  new Counter({
    name: 'gantry_pr_github_rate_limited_total',
    help: 'GitHub requests of this process refused because the primary rate limit was used up (each ends its run, and no run starts before the reset)',
  });

if (!register.getSingleMetric('gantry_pr_github_rate_limit_hold_seconds')) {
  new Gauge({
    name: 'gantry_pr_github_rate_limit_hold_seconds',
    help: 'Seconds until the reset of GitHub\'s primary rate limit this process holds every pull request\'s run for; 0 when it holds none',
    collect() {
      const now = Date.now();
      this.set(Math.max(0, ...[...holds].map((h) => (h.knownUntil() - now) / 1000)));
    },
  });
}

/**
 * GitHub's primary rate limit is the token's (or the App installation's), not one PR's, and GitHub may ban an
 * integration that keeps asking while limited: once a request met it, no PR's run starts before its reset — on any
 * replica, and after a restart. So the reset is kept in the `github_rate_limit` table (the latest one met), which
 * every replica reads before a run (at most once a second; a run started in that second meets the limit itself).
 */
@Injectable()
export class GitHubRateLimitHold implements OnApplicationShutdown {
  /** The latest reset this process knows of (epoch ms), and when it last read the table. */
  private until = 0;
  private readAt = -Infinity;

  constructor(@Inject(EventStore) private readonly store: EventStore) {
    holds.add(this);
  }

  onApplicationShutdown(): void {
    holds.delete(this);
  }

  knownUntil(): number {
    return this.until;
  }

  /** How long runs still wait for the reset (0: no hold), `now` by the service's clock. */
  async waitMs(now: number): Promise<number> {
    if (this.until <= now && Date.now() - this.readAt >= READ_EVERY_MS) {
      const { rows } = await this.store.pool.query<{ until: Date }>(`SELECT until FROM github_rate_limit WHERE scope = 'token'`);
      this.readAt = Date.now();
      if (rows[0]) this.until = Math.max(this.until, rows[0].until.getTime());
    }
    return Math.max(0, this.until - now);
  }

  /** A request met the limit: no run starts before `retryAt` (the reset and the second GitHub asks for), here at once and on every replica. */
  async holdUntil(retryAt: string): Promise<void> {
    limited.inc();
    this.until = Math.max(this.until, Date.parse(retryAt));
    await this.store.pool.query(
      `INSERT INTO github_rate_limit (scope, until) VALUES ('token', $1)
       ON CONFLICT (scope) DO UPDATE SET until = GREATEST(github_rate_limit.until, EXCLUDED.until)`,
      [retryAt],
    );
  }
}
