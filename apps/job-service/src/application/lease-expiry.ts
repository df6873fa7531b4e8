import { Inject, Injectable, type BeforeApplicationShutdown, type OnApplicationBootstrap } from '@nestjs/common';
import { InjectPinoLogger, PinoLogger } from 'nestjs-pino';
import { ErrorCode, GantryError } from '@gantry/contracts';
import { decideWithin, EventStore, isDatabaseUnreachable, lastLeaseSweep, recordLeaseSweep } from '@gantry/eventstore';
import { Bus } from '@gantry/messaging';
import { BusLossResumption, describeFault, GantryTransport, holdHereIfAsked, RecurringFaults, Sweep } from '@gantry/service-runtime';
import { jobDecider } from '../domain/index.js';
import { ClaimPicker } from './claim-picker.js';
import { JOB_SERVICE_CONFIG, type JobServiceConfig } from './job-service-settings.js';

/**
 * How often a replica records that it serves (`lease_sweeps`) when its sweeps come less often: a
 * start or a bus loss takes serving to have stopped at the latest record, so with only the sweeps
 * recording it, a replica sweeping once an hour would let the next start resume the leases that ran
 * out in the hour before, while it served and refused their runners.
 */
export const SERVING_MARK_MS = 1000;

/** The expired leases a pass reads at a time. */
export const LEASE_SWEEP_PAGE = 500;

/** A lease the sweep read as run out; its expiry as PostgreSQL writes it, to read on after it exactly. */
interface ExpiredLease {
  job_id: string;
  lease_token: number;
  expires_at: string;
}

/** Refusals that mean the lease ended or moved on between the sweep's look and its append. */
const LEASE_MOVED_ON: ReadonlySet<string> = new Set([ErrorCode.STALE_FENCE, ErrorCode.INVALID_TRANSITION, ErrorCode.PRECONDITION_FAILED, ErrorCode.VERSION_CONFLICT]);

/**
 * Liveness (docs/jobs.md, "Leases and liveness"): every replica sweeps for CLAIMED/RUNNING jobs whose lease
 * expired by this service's clock and appends JobLeaseExpired at the version it loaded. Two replicas
 * sweeping the same lease: one append wins, the other reloads, finds the lease ended and does
 * nothing — one expiry event, one attempt increment. After the last attempt the job FAILs.
 */
@Injectable()
export class LeaseExpirySweep implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly sweeps: Sweep;
  /** Records between the sweeps that this replica serves (none when it sweeps at least as often). */
  private readonly marks: Sweep | null;
  private readonly resumption: BusLossResumption;
  private sweepingWithoutBus = false;
  /** The leases this replica's passes fail to expire, one key per claim (job id and lease token). */
  private readonly faulty = new RecurringFaults('job-lease');

  constructor(
    @Inject(EventStore) private readonly store: EventStore,
    @Inject(Bus) private readonly bus: Bus,
    @InjectPinoLogger('lease-expiry') private readonly log: PinoLogger,
    @Inject(JOB_SERVICE_CONFIG) config: JobServiceConfig,
    @Inject(ClaimPicker) private readonly picker: ClaimPicker,
    @Inject(GantryTransport) private readonly transport: GantryTransport,
  ) {
    this.sweeps = new Sweep({ name: 'lease-expiry', everyMs: config.leaseSweepMs, run: () => this.sweep(), log });
    this.marks = config.leaseSweepMs > SERVING_MARK_MS ? new Sweep({ name: 'serving-mark', everyMs: SERVING_MARK_MS, run: () => this.markServing(), log }) : null;
    this.resumption = new BusLossResumption(bus, async () => {
      const resumed = await this.resumeLeases('bus_loss');
      this.sweepingWithoutBus = false;
      this.log.info({ resumed }, 'NATS is back: job leases resumed');
    });
  }

  /**
   * As this service begins to serve (right before it takes commands), and before it sweeps: every
   * live claim's lease runs as long again from then (docs/jobs.md, "A job service outage"). Not from
   * an earlier point of the start (Nest runs this hook before the transport starts): no runner could
   * renew its lease before the service served, and a start slower than a lease would have the first
   * sweep expire it.
   */
  async onApplicationBootstrap(): Promise<void> {
    this.transport.beforeServing(async () => {
      const resumed = await this.resumeLeases();
      if (resumed > 0) this.log.info({ resumed }, 'job leases resumed at start');
      // The first pass at once: a lease that ran out while a job service served (left out of the
      // resumption) is expired now, not one sweep interval later — up to an hour on a replica set so.
      this.sweeps.start({ now: true });
      this.marks?.start();
    });
    // Test-only (GANTRY_TEST_HOLD_AT): a start slow to serve its first command.
    await holdHereIfAsked('job-start:before-serving');
  }

  // Before the runtime closes the pool: a sweep in flight finishes, no new one starts.
  async beforeApplicationShutdown(): Promise<void> {
    await Promise.all([this.sweeps.stop(), this.marks?.stop()]);
    this.faulty.clear();
  }

  /**
   * Resumes the lease of every CLAIMED/RUNNING job that was still live when serving stopped: its runner
   * could not renew it while no job service ran, so the time nobody served does not count against it.
   * Serving is taken to have stopped at the latest sweep any replica made with its bus up (nothing
   * later proves one served); a lease that ran out before it ran out while one served, and is left to
   * the sweep. Returns the number resumed.
   */
  async resumeLeases(after: 'start' | 'bus_loss' = 'start'): Promise<number> {
    const now = this.store.clock().toISOString();
    const lastSweptAt = await lastLeaseSweep(this.store.pool);
    // A lease that ran out before the last sweep ran out while a job service served: the sweep's.
    const { rows } = await this.store.pool.query<{ job_id: string; lease_token: number }>(
      `SELECT job_id, lease_token FROM jobs WHERE status IN ('CLAIMED', 'RUNNING') AND ($1::timestamptz IS NULL OR lease_expires_at > least($1::timestamptz, $2::timestamptz))`,
      [lastSweptAt, now],
    );
    let resumed = 0;
    for (const row of rows) {
      try {
        const done = await this.store.execute({ metadata: { correlationId: `lease-resume:${row.job_id}:${row.lease_token}`, actor: 'job-service' } }, async (uow) => {
          const decision = await decideWithin(uow, jobDecider, row.job_id, {
            type: 'ResumeJobLease',
            data: { jobId: row.job_id, leaseToken: row.lease_token, now, after, lastSweptAt },
          });
          return decision.decided.length > 0;
        });
        if (done.result) resumed++;
      } catch (error) {
        // Another replica resumed or ended the claim between the look and the append.
        if (error instanceof GantryError && error.code === ErrorCode.VERSION_CONFLICT) continue;
        if (isDatabaseUnreachable(error)) throw error;
        // A fault of this job alone (its view and its log disagree, a row the database refuses) does
        // not keep the service from starting: said loudly, and the other leases are resumed.
        this.log.error({ jobId: row.job_id, leaseToken: row.lease_token, ...describeFault(error) }, 'a lease could not be resumed');
      }
    }
    return resumed;
  }

  /**
   * Once the bus is back after a loss, every live lease resumed (once per loss), before the sweep
   * expires anything and before a command under a claim judges its lease (BusLossResumption).
   */
  afterBusLoss(): Promise<void> {
    return this.resumption.settle();
  }

  /**
   * One pass; returns the number of leases this replica expired. None while this service's bus is
   * down: the runners cannot reach it then (their renewals find nobody serving, and do not count that
   * time), so a lease that ran out meanwhile says nothing about its runner. Once the bus is back, every
   * live lease is resumed before anything expires (docs/jobs.md, "A job service outage"). The
   * expired leases are read `pageSize` at a time.
   */
  async sweep(pageSize = LEASE_SWEEP_PAGE): Promise<number> {
    if (!this.bus.connected) {
      if (!this.sweepingWithoutBus) this.log.warn('NATS is not reachable: no job lease expires until it is back');
      this.sweepingWithoutBus = true;
      return 0;
    }
    await this.afterBusLoss();
    const now = this.store.clock();
    // This pass looks at every lease that ran out by now: a later start or bus loss resumes none of them.
    await this.recordServing(now);
    let expired = 0;
    // Page after page in expiry order, each read on after the last lease the one before held (by its
    // expiry, then its job id): a lease this pass could not expire stays in the view, and a pass that
    // read the oldest page again would meet the same faulty leases, and with a page of them, nothing
    // after them ever (docs/jobs.md, "Leases and liveness"). The pass ends at `now`.
    let after: ExpiredLease | undefined;
    this.faulty.passBegins();
    for (;;) {
      const { rows } = await this.store.pool.query<ExpiredLease>(
        `SELECT job_id, lease_token, lease_expires_at::text AS expires_at FROM jobs
          WHERE status IN ('CLAIMED', 'RUNNING') AND lease_expires_at <= $1
            AND ($3::text IS NULL OR (lease_expires_at >= $2::timestamptz AND (lease_expires_at, job_id) > ($2::timestamptz, $3::text)))
          ORDER BY lease_expires_at, job_id LIMIT $4`,
        [now, after?.expires_at ?? null, after?.job_id ?? null, pageSize],
      );
      for (const row of rows) {
        // Lost during the pass: the rest waits for the resumption.
        if (this.resumption.pending) return expired;
        if (await this.expire(row, now)) expired++;
      }
      if (rows.length < pageSize) {
        // A faulty lease this whole pass did not meet has moved on: the next failure is news again.
        this.faulty.passEnded();
        return expired;
      }
      after = rows[rows.length - 1];
    }
  }

  /** Expires one lease that ran out by `now`; false when it had moved on, another replica has it, or it is faulty. */
  private async expire(row: ExpiredLease, now: Date): Promise<boolean> {
    const claim = `${row.job_id}:${row.lease_token}`;
    try {
      const done = await this.store.execute({ metadata: { correlationId: `lease-expiry:${row.job_id}:${row.lease_token}`, actor: 'job-service' } }, async (uow) => {
        // Another replica working on the same row right now: leave it to that one.
        const locked = await uow.sql.query(`SELECT 1 FROM jobs WHERE job_id = $1 FOR UPDATE SKIP LOCKED`, [row.job_id]);
        if (locked.rowCount === 0) return false;
        const decision = await decideWithin(uow, jobDecider, row.job_id, {
          type: 'ExpireJobLease',
          data: { jobId: row.job_id, leaseToken: row.lease_token, now: now.toISOString() },
        });
        return decision.decided.length > 0;
      });
      if (!done.result) {
        // Another replica has it right now, or it had ended: still standing if it was failing.
        this.faulty.met(claim);
        return false;
      }
      const fault = this.faulty.handled(claim);
      if (fault) this.log.info({ jobId: row.job_id, leaseToken: row.lease_token, failedTries: fault.failedTries, faultySince: new Date(fault.since).toISOString() }, 'a lease that could not be expired has expired');
      // Back in the queue, in its place ahead of the claims' look-ahead (or failed: a look-up more).
      this.picker.requeued();
      this.log.info({ jobId: row.job_id, leaseToken: row.lease_token }, 'job lease expired');
      return true;
    } catch (error) {
      // The lease ended (finished, renewed, expired by another replica) between the look and the append.
      if (error instanceof GantryError && LEASE_MOVED_ON.has(error.code)) {
        this.faulty.handled(claim);
        return false;
      }
      // No database: the pass ends here, the next one tries again.
      if (isDatabaseUnreachable(error)) throw error;
      // Anything else is a fault of this job (its view and its log disagree, a row the database
      // refuses): counted, said loudly when first found and then at growing intervals (not at every
      // pass: a lease stuck for hours would flood the log), tried again at every pass, and the pass
      // goes on past it with the other leases (docs/jobs.md, "Leases and liveness").
      const fault = this.faulty.failed(claim, now.getTime());
      if (fault.log) {
        this.log.error(
          { jobId: row.job_id, leaseToken: row.lease_token, ...describeFault(error), failedTries: fault.failedTries, faultySince: new Date(fault.since).toISOString() },
          'a lease could not be expired',
        );
      }
      return false;
    }
  }

  /**
   * Records that this replica serves now, between sweeps that come seldom: a lease that runs out
   * before this moment ran out while a job service served (its runner was refused), so a later start
   * or bus loss does not resume it and the next sweep expires it. Not while the bus is down, nor
   * before the leases are resumed after a loss: that resumption judges by the record made before it.
   */
  async markServing(): Promise<void> {
    if (!this.bus.connected || this.resumption.pending) return;
    await this.recordServing(this.store.clock());
  }

  private async recordServing(now: Date): Promise<void> {
    await recordLeaseSweep(this.store.pool, now);
  }
}
