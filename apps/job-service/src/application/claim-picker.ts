import { Inject, Injectable } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import DataLoader from 'dataloader';
import { EventStore } from '@gantry/eventstore';
import { JOB_SERVICE_CONFIG, type JobServiceConfig } from './job-service-settings.js';

/** The job a request got was taken by another request of the same batch: it looks again. */
const AGAIN = Symbol('again');

type PickRequest = { kinds: readonly string[]; passed: readonly string[] };

/**
 * The oldest `$3` queued jobs of the kinds `$1`, but those in `$2` and those whose hand-back pause
 * has not ended by `$4` (docs/jobs.md, "Attempts"): `gantry_pick_queued`, a function the job service's
 * migrations add (`JobServiceQueuePick…`, `JobServicePausedJobsOutOfPick…`). Each kind is read on its
 * own, oldest first, from the queue's index (kind, enqueue_position, job_id, and the pause's end: all
 * the read needs) and only as far as it needs; the kinds' picks are then merged. Asked for all the
 * kinds at once, PostgreSQL cannot read that index in order across them: it reads every queued job of
 * those kinds and sorts them, or walks the listing index in enqueue order through every finished job
 * before the queue — on every claim, at a cost that grows with the queue or with the history. The
 * function runs with incremental sorts off, which keeps PostgreSQL from that walk whatever the table's size.
 */
export const PICK = {
  name: 'gantry_pick_queued',
  text: `SELECT job_id FROM gantry_pick_queued($1::text[], $2::text[], $3::integer, $4::timestamptz) AS job_id`,
};

/**
 * The pick with holds (`gantry_pick_and_hold`, a function the job service's migrations add,
 * `JobServiceClaimHolds…`): as PICK (`$6` the time it is made at), but without the jobs another
 * replica's picker holds, and each job picked is then held by this one for `$5` ms (`held` false:
 * another replica took it meanwhile).
 */
export const PICK_AND_HOLD = {
  name: 'gantry_pick_and_hold',
  text: `SELECT job_id, held FROM gantry_pick_and_hold($1::text[], $2::text[], $3::integer, $4::text, $5::integer, $6::timestamptz)`,
};

/** Removes the holds that ran out; waits for no row (a hold being taken over is left for the next time). */
const SWEEP_HOLDS = `DELETE FROM claim_holds WHERE job_id IN (SELECT job_id FROM claim_holds WHERE held_until <= clock_timestamp() FOR UPDATE SKIP LOCKED)`;

/** How long a look-ahead serves claims, at most: the bound on what it cannot hear of (see ClaimPicker). */
export const LOOK_AHEAD_MS = 250;

/** How long a picked job is held from other replicas' look-ups: the look-ahead's life, and time for its claim's write. */
export const HOLD_MS = 4 * LOOK_AHEAD_MS;

/**
 * Which queued job a claim takes: the oldest of the runner's kinds that no other claim of this
 * process is taking. Claims that arrive together share one look-up (DataLoader collects them over
 * one turn of the event loop) and get different jobs, oldest first; a job stays reserved until
 * its claim has been written or given up (`release`). Nothing here is a lock: the claim's append at
 * the version it read is what decides (docs/jobs.md, "Claims"), so a claim of another replica that
 * took the same job first makes this one pick again.
 *
 * A look-up reads `lookAhead` jobs more than its claims need; the next claims of the same kinds
 * take those, oldest first, without a look-up of their own (a round trip less, before the claim's
 * write). Before they have taken it all — when a claim leaves fewer than half of it — the look-ahead
 * is read again in the background (`refill`), so that under a steady stream of claims none waits for
 * a look-up. The look-ahead is the queue's head as the look-up saw it, so it is dropped whenever it may
 * no longer be: when this process puts a job back in the queue (`requeued`; the job keeps its place,
 * ahead of the look-ahead's), when a claim fails after its pick (its job is queued still), and after
 * `LOOK_AHEAD_MS`. A job enqueued meanwhile is younger than every job of the look-ahead, so the order
 * stays the queue's.
 *
 * Replicas claiming from one queue would otherwise pick the same jobs (each the oldest), and all but
 * one of their claims of a job would lose its write; so a look-up holds the jobs it picks for
 * `HOLD_MS` (`claim_holds`), and skips those another replica's picker holds. The oldest queued jobs
 * go to the replica that looked first, the next ones to the other.
 */
@Injectable()
export class ClaimPicker {
  private readonly reserved = new Set<string>();
  /** The queue's head beyond what the last look-up's claims took, by kinds; oldest first. */
  private readonly ahead = new Map<string, { jobIds: string[]; until: number }>();
  /** Counts the drops of the look-ahead: a look-up sent before one does not leave its rows. */
  private generation = 0;
  private readonly loader: DataLoader<PickRequest, string | null | typeof AGAIN>;
  private readonly lookAhead: number;
  /** Whose holds this picker's are (a process's own, kept by none other). */
  private readonly holder = randomUUID();
  /** When the holds that ran out are next removed (performance.now()). */
  private nextSweep = 0;
  /**
   * For each look-up under way, the jobs reserved since it was sent: its answer may still show them
   * queued, their claims written meanwhile (see lookUp).
   */
  private readonly lookUpsUnderWay = new Set<Set<string>>();
  /** The kinds whose look-ahead is being read again. */
  private readonly refilling = new Set<string>();
  /** A claim that leaves fewer of the look-ahead's jobs than this has it read again (half of it). */
  private readonly refillBelow: number;

  constructor(
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(JOB_SERVICE_CONFIG) config: Pick<JobServiceConfig, 'claimLookAhead'>,
  ) {
    this.lookAhead = config.claimLookAhead;
    this.refillBelow = Math.ceil(config.claimLookAhead / 2);
    this.loader = new DataLoader((requests) => this.pickAll(requests), { cache: false, batchScheduleFn: (send) => setImmediate(send) });
  }

  /** The job this claim should try (reserved for it), or null when none of its kinds is queued. */
  async pick(kinds: readonly string[], passed: readonly string[] = []): Promise<string | null> {
    if (passed.length === 0) {
      const key = kindsKey(kinds);
      const jobId = this.fromLookAhead(key);
      if (jobId) {
        if ((this.ahead.get(key)?.jobIds.length ?? 0) < this.refillBelow) this.refill(key, kinds);
        return jobId;
      }
    }
    for (;;) {
      const picked = await this.loader.load({ kinds, passed });
      if (picked !== AGAIN) return picked;
    }
  }

  /** The claim of a picked job was written, or found the job no longer queued. */
  release(jobId: string): void {
    this.reserved.delete(jobId);
  }

  /** A job of this process went back to the queue, or a picked job stayed in it: the look-ahead may skip it. */
  requeued(): void {
    this.ahead.clear();
    this.generation += 1;
  }

  /** Reserved for one claim; no longer in any look-ahead (kinds that overlap share jobs). */
  private reserve(jobId: string): void {
    this.reserved.add(jobId);
    for (const taken of this.lookUpsUnderWay) taken.add(jobId);
    for (const ahead of this.ahead.values()) {
      const i = ahead.jobIds.indexOf(jobId);
      if (i >= 0) ahead.jobIds.splice(i, 1);
    }
  }

  private fromLookAhead(key: string): string | undefined {
    const ahead = this.ahead.get(key);
    if (!ahead) return undefined;
    if (ahead.until <= performance.now()) {
      this.ahead.delete(key);
      return undefined;
    }
    const jobId = ahead.jobIds.shift();
    if (jobId !== undefined) {
      this.reserve(jobId);
      return jobId;
    }
    this.ahead.delete(key);
    return undefined;
  }

  /** Now and then, the holds that ran out (of any replica) are removed, in a statement of their own. */
  private sweepHolds(): void {
    const now = performance.now();
    if (now < this.nextSweep) return;
    this.nextSweep = now + HOLD_MS;
    // Only keeps the table small: a hold that ran out is ignored, and taken over, by every look-up.
    this.store.pool.query(SWEEP_HOLDS).catch(() => undefined);
  }

  /**
   * Reads the look-ahead of these kinds again, in the background, before the claims have taken it
   * all: the next claims then take their jobs from memory rather than wait for a look-up. The answer
   * replaces the look-ahead: the queue's head as it is now, without the jobs reserved meanwhile.
   */
  private refill(key: string, kinds: readonly string[]): void {
    if (this.refilling.has(key)) return;
    this.refilling.add(key);
    const generation = this.generation;
    this.sweepHolds();
    this.lookUp(kinds, [], this.lookAhead)
      .then(({ jobIds }) => {
        if (generation !== this.generation) return;
        this.ahead.set(key, { jobIds: jobIds.filter((jobId) => !this.reserved.has(jobId)), until: performance.now() + LOOK_AHEAD_MS });
      })
      // A look-ahead not read again is read by the next claim that finds it empty.
      .catch(() => undefined)
      .finally(() => this.refilling.delete(key));
  }

  /**
   * The oldest `count` queued jobs of `kinds` but those reserved and `passed`, now held by this
   * picker, oldest first. Left out: a job another replica held first, and a job a claim of this
   * process took (from the look-ahead) while the look-up was under way — its claim may have been
   * written meanwhile, and the answer still show it queued; given to a claim, it would be refused
   * as claimed, and the claim would look again, alone. `lostSome`: something was left out, so a
   * claim left without a job should look again rather than find the queue empty.
   */
  private async lookUp(kinds: readonly string[], passed: readonly string[], count: number): Promise<{ jobIds: string[]; lostSome: boolean }> {
    const taken = new Set<string>();
    this.lookUpsUnderWay.add(taken);
    try {
      const { rows } = await this.store.pool.query<{ job_id: string; held: boolean }>({
        ...PICK_AND_HOLD,
        // A job in its hand-back pause is left out by the job service's clock, which its claim is decided by.
        values: [kinds, [...this.reserved, ...passed], count, this.holder, HOLD_MS, this.store.clock()],
      });
      const jobIds = rows.filter((row) => row.held && !taken.has(row.job_id)).map((row) => row.job_id);
      return { jobIds, lostSome: jobIds.length < rows.length };
    } finally {
      this.lookUpsUnderWay.delete(taken);
    }
  }

  private async pickAll(requests: readonly PickRequest[]): Promise<Array<string | null | typeof AGAIN>> {
    // Requests for the same kinds share a look-up; one that passed over stale jobs has its own.
    const groups = new Map<string, number[]>();
    requests.forEach((request, i) => {
      const key = request.passed.length > 0 ? `#${i}` : kindsKey(request.kinds);
      groups.set(key, [...(groups.get(key) ?? []), i]);
    });
    const picked: Array<string | null | typeof AGAIN> = requests.map(() => null);
    const generation = this.generation;
    this.sweepHolds();
    await Promise.all(
      [...groups.entries()].map(async ([key, members]) => {
        const { kinds, passed } = requests[members[0]!]!;
        const extra = passed.length === 0 ? this.lookAhead : 0;
        // A claim left without a job looks again when the look-up left some out (another replica's
        // holds are then skipped), unless the queue had no more.
        const { jobIds: found, lostSome } = await this.lookUp(kinds, passed, members.length + extra);
        members.forEach((member, i) => {
          // Another group of this batch may have taken the same job (kinds that overlap): that claim looks again.
          const jobId = found[i];
          if (jobId === undefined) {
            if (lostSome) picked[member] = AGAIN;
            return;
          }
          if (this.reserved.has(jobId)) {
            picked[member] = AGAIN;
            return;
          }
          this.reserve(jobId);
          picked[member] = jobId;
        });
        if (extra > 0 && generation === this.generation) {
          const jobIds = found.slice(members.length).filter((jobId) => !this.reserved.has(jobId));
          this.ahead.set(key, { jobIds, until: performance.now() + LOOK_AHEAD_MS });
        }
      }),
    );
    return picked;
  }
}

function kindsKey(kinds: readonly string[]): string {
  return JSON.stringify([...new Set(kinds)].sort());
}
