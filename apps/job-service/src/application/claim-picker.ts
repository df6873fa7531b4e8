import DataLoader from 'dataloader';
import type pg from 'pg';

/** The job a request got was taken by another request of the same batch: it looks again. */
const AGAIN = Symbol('again');

type PickRequest = { kinds: readonly string[]; passed: readonly string[] };

/**
 * The oldest `$3` queued jobs of the kinds `$1`, but those in `$2`: `gantry_pick_queued`, a function
 * the job service's migrations add (`JobServiceQueuePick…`). Each kind is read on its own, oldest
 * first, from the queue's index (kind, enqueue_position, job_id: all the read needs) and only as far
 * as it needs; the kinds' picks are then merged. Asked for all the kinds at once, PostgreSQL cannot
 * read that index in order across them: it reads every queued job of those kinds and sorts them, or
 * walks the listing index in enqueue order through every finished job before the queue — on every
 * claim, at a cost that grows with the queue or with the history. The function runs with
 * incremental sorts off, which keeps PostgreSQL from that walk whatever the table's size.
 */
export const PICK = {
  name: 'gantry_pick_queued',
  text: `SELECT job_id FROM gantry_pick_queued($1::text[], $2::text[], $3::integer) AS job_id`,
};

/**
 * Which queued job a claim takes: the oldest of the runner's kinds that no other claim of this
 * process is taking. Claims that arrive together share one look-up (DataLoader collects them over
 * one turn of the event loop) and get different jobs, oldest first; a job stays reserved until
 * its claim has been written or given up (`release`). Nothing here is a lock: the claim's append at
 * the version it read is what decides (docs/jobs.md, "Claims"), so a claim of another replica that
 * took the same job first makes this one pick again.
 */
export class ClaimPicker {
  private readonly reserved = new Set<string>();
  private readonly loader: DataLoader<PickRequest, string | null | typeof AGAIN>;

  constructor(private readonly pool: pg.Pool) {
    this.loader = new DataLoader((requests) => this.pickAll(requests), { cache: false, batchScheduleFn: (send) => setImmediate(send) });
  }

  /** The job this claim should try (reserved for it), or null when none of its kinds is queued. */
  async pick(kinds: readonly string[], passed: readonly string[] = []): Promise<string | null> {
    for (;;) {
      const picked = await this.loader.load({ kinds, passed });
      if (picked !== AGAIN) return picked;
    }
  }

  release(jobId: string): void {
    this.reserved.delete(jobId);
  }

  private async pickAll(requests: readonly PickRequest[]): Promise<Array<string | null | typeof AGAIN>> {
    // Requests for the same kinds share a look-up; one that passed over stale jobs has its own.
    const groups = new Map<string, number[]>();
    requests.forEach((request, i) => {
      const key = request.passed.length > 0 ? `#${i}` : JSON.stringify([...request.kinds].sort());
      groups.set(key, [...(groups.get(key) ?? []), i]);
    });
    const picked: Array<string | null | typeof AGAIN> = requests.map(() => null);
    await Promise.all(
      [...groups.values()].map(async (members) => {
        const { kinds, passed } = requests[members[0]!]!;
        const { rows } = await this.pool.query<{ job_id: string }>({ ...PICK, values: [kinds, [...this.reserved, ...passed], members.length] });
        members.forEach((member, i) => {
          // Another group of this batch may have taken the same job (kinds that overlap): that claim looks again.
          const jobId = rows[i]?.job_id;
          if (jobId === undefined) return;
          if (this.reserved.has(jobId)) {
            picked[member] = AGAIN;
            return;
          }
          this.reserved.add(jobId);
          picked[member] = jobId;
        });
      }),
    );
    return picked;
  }
}
