import { Inject, Injectable, type BeforeApplicationShutdown, type OnApplicationBootstrap } from '@nestjs/common';
import { InjectPinoLogger, PinoLogger } from 'nestjs-pino';
import pTimeout from 'p-timeout';
import {
  claimableAfterMs,
  claimableFrom,
  claimJob,
  deriveIdempotencyKey,
  ErrorCode,
  isGantryError,
  jobOfferMessageId,
  scrubStrings,
  type JobKind,
  type JobOffer,
  type ReplyOf,
  type SecretScrubber,
} from '@gantry/contracts';
import { Bus, CommandClient, isTransient, nobodyServed } from '@gantry/messaging';
import { componentLogger, holdHereIfAsked, Liveness, processStop, Readiness, SECRET_SCRUBBER, SERVICE_CONFIG, type ComponentLogger, type ServiceConfig } from '@gantry/service-runtime';
import { CancellationWatch } from '../infrastructure/job-service/job-cancellations.js';
import { claimUnderKey, type ClaimAnswered } from '../infrastructure/job-service/job-claim.js';
import { DispatchIntake, type HeldOffer } from '../infrastructure/job-service/offer-intake.js';
import { Backoff, untilPauseEndsMs } from './backoff.js';
import { EarlierRunLeft, settleEarlierRun } from './earlier-run.js';
import { JobRun, runCorrelationId, type JobRunOutcome } from './job-run.js';
import { RUNNER_CONFIG, stopMarginMs, type RunnerConfig } from './runner-config.js';
import { takeScratchFolder } from './scratch-ownership.js';
import { Slots } from './slots.js';

/**
 * A claim lost to another runner or to the job's state: the offer is dropped. A PRECONDITION_FAILED
 * for the job's pause after a hand-back is the exception: the offer goes back until the pause ends.
 */
const LOST_CLAIM_CODES = new Set<string>([
  ErrorCode.ALREADY_CLAIMED,
  ErrorCode.INVALID_TRANSITION,
  ErrorCode.NOT_FOUND,
  ErrorCode.PRECONDITION_FAILED,
  ErrorCode.STALE_FENCE,
]);

/**
 * The runner loop: per job kind, reserve a free slot, take one offer from the kind's shared
 * durable consumer, claim the offered job, run it, and only then acknowledge the offer. Errors
 * back off exponentially; an expired agent token marks the runner unhealthy and not ready, and
 * stops the intake; SIGTERM stops the intake, gives running jobs a grace period, then stops their
 * agents and rolls their claims back. At start it takes its scratch folder (refusing one another
 * live runner uses) and settles what an earlier run under its id left; while it runs it hears of
 * cancelled jobs at once (docs/jobs.md).
 */
@Injectable()
export class RunnerDaemon implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private accepting = false;
  private intakeReady = false;
  private readonly slots: Slots;
  private readonly intake: DispatchIntake;
  private readonly loops: Promise<void>[] = [];
  private readonly running = new Set<Promise<void>>();
  /** The runs in progress, by job id: a cancel is delivered to its run. */
  private readonly runs = new Map<string, JobRun>();
  /** The offers being handled (their Nats-Msg-Id), from the claim to the end of the run. */
  private readonly handling = new Set<string>();
  private readonly cancellations: CancellationWatch;
  /** Why this runner's agents cannot run (an expired token, a CLI that cannot be started): then it takes no work. */
  private agentUnusable: string | null = null;
  private settled = false;
  private readonly shutdown = new AbortController();
  /** When the stop began (epoch ms): the process's stop request (processStop), or the close when nothing asked first. */
  private stopBegan: number | null = null;
  private deadlineTimer: NodeJS.Timeout | null = null;
  private readonly stopAsked = () => this.beginStop(processStop.requestedAt!);
  /** When a stop began: the moment its hand-backs and releases must be done by (epoch ms), else never. */
  private stopsBy = Infinity;
  /** Aborted at `stopsBy`: every command still waiting then is given up. */
  private readonly stopDeadline = new AbortController();
  /** Separate counts: pulls that keep working must not reset the backoff of claims that keep failing. */
  private readonly intakeBackoff: Backoff;
  private readonly claimBackoff: Backoff;
  /** Runs its host failed in a row (a host refusal): a broken host takes no offers for a while, longer each time. */
  private readonly hostBackoff: Backoff;
  /** No offer is taken before this moment (epoch ms): the host's pause after such a run. */
  private intakePausedUntil = 0;
  private readonly sleepers = new Set<() => void>();
  /** The same logger in the `(message, fields)` shape the runner's parts take. */
  private readonly partsLog: ComponentLogger;

  constructor(
    @Inject(RUNNER_CONFIG) private readonly config: RunnerConfig,
    @Inject(SERVICE_CONFIG) serviceConfig: ServiceConfig,
    @Inject(Bus) private readonly bus: Bus,
    @Inject(CommandClient) private readonly commands: CommandClient,
    @Inject(Liveness) private readonly liveness: Liveness,
    @Inject(Readiness) private readonly readiness: Readiness,
    @InjectPinoLogger('runner') private readonly log: PinoLogger,
    @Inject(SECRET_SCRUBBER) private readonly scrub: SecretScrubber,
  ) {
    this.slots = new Slots(config.concurrency);
    this.partsLog = scrubbing(componentLogger(this.log, 'runner'), this.scrub);
    this.intake = new DispatchIntake({ bus, ackWaitMs: config.offerAckWaitMs, streamReplicas: serviceConfig.streamReplicas, log: this.partsLog });
    const backoff = { initialMs: config.backoffInitialMs, maxMs: config.backoffMaxMs };
    this.intakeBackoff = new Backoff(backoff);
    this.claimBackoff = new Backoff(backoff);
    this.hostBackoff = new Backoff(backoff);
    this.cancellations = new CancellationWatch(bus, (c) => this.runs.get(c.jobId)?.cancel(c.revokedLeaseToken), this.partsLog);
  }

  async onApplicationBootstrap(): Promise<void> {
    // Before anything is cleared up: another live runner's agents must never be taken for leftovers.
    await takeScratchFolder(this.config.scratchDir, this.config.runnerId);
    this.readiness.register('dispatch', () => ({
      ok: this.intakeReady || !this.accepting,
      detail: { runnerId: this.config.runnerId, kinds: this.config.kinds, accepting: this.accepting, jobsRunning: this.running.size, settled: this.settled },
    }));
    // A runner whose agents cannot log in takes no work: it must not look ready for any.
    this.readiness.register('agent-token', () =>
      this.agentUnusable === null ? { ok: true } : { ok: false, detail: this.agentUnusable },
    );
    this.readiness.register('cancellations', () => ({ ok: this.cancellations.ready || !this.accepting }));
    this.cancellations.start();
    this.accepting = true;
    this.log.info({
      runnerId: this.config.runnerId,
      kinds: this.config.kinds,
      concurrency: this.config.concurrency,
      agentBin: this.config.agentBin,
    }, 'runner started');
    // A SIGTERM stops the intake at once, not when the application's close reaches this runner: one
    // that comes while the process still starts (or before this) leaves nothing claimed after it.
    if (processStop.signal.aborted) this.beginStop(processStop.requestedAt!);
    else processStop.signal.addEventListener('abort', this.stopAsked, { once: true });
    this.loops.push(
      // Ready once the intake is prepared (a job service that is not up yet does not make the runner
      // unready); no claim is made before the earlier run is settled (see handleOffer).
      Promise.all([this.settleEarlierRun(), this.prepareIntake().then(() => Promise.all(this.config.kinds.map((kind) => this.intakeLoop(kind))))])
        .then(() => undefined),
    );
  }

  /**
   * The whole stop fits in the process's stop limit (`GANTRY_SHUTDOWN_GRACE_MS`), past which it exits 1
   * (docs/jobs.md, "Stopping a runner"): the runs' grace and their agents' stop, then their hand-backs
   * and releases until `stopsBy` (the limit less a margin), when every command still waiting is given
   * up; the margin closes NATS and HTTP, each drain bounded by what is left of it.
   */
  async beforeApplicationShutdown(): Promise<void> {
    processStop.signal.removeEventListener('abort', this.stopAsked);
    const stopBegan = this.beginStop(processStop.requestedAt ?? Date.now());
    const limitEndsAt = stopBegan + this.config.stopLimitMs;
    const margin = stopMarginMs(this.config.stopLimitMs);
    // The intake's end (a pull, a settling of an earlier run in flight) does not hold back the runs' grace.
    const intakeEnded = Promise.all(this.loops).catch((error: unknown) => this.log.error({ error: this.scrub(String(error)) }, 'the intake ended with an error'));
    // What the deadline gives up still says what it left: the runs, and a settling of an earlier run.
    const slackMs = margin / 4;
    try {
      await this.stopRuns(stopBegan, slackMs);
      await pTimeout(intakeEnded, { milliseconds: Math.max(0, this.stopsBy + slackMs - Date.now()), fallback: () => undefined });
    } finally {
      if (this.deadlineTimer !== null) clearTimeout(this.deadlineTimer);
      this.stopDeadline.abort();
      // Half the margin is kept for closing HTTP and exiting.
      await this.closeNats(limitEndsAt - margin / 2);
    }
  }

  /**
   * Gives the running jobs their grace, then stops their agents and waits for their hand-backs until
   * the stop's deadline (and `slackMs` for the runs to say how they ended). A run still going then (an
   * agent's processes that outlived their SIGKILL hold it) leaves its claim to expire, logged and counted.
   */
  private async stopRuns(stopBegan: number, slackMs: number): Promise<void> {
    if (this.running.size === 0) return;
    this.log.info({ jobs: this.running.size, graceMs: this.config.shutdownGraceMs }, 'waiting for running jobs');
    const graceLeftMs = Math.max(0, stopBegan + this.config.shutdownGraceMs - Date.now());
    const settled = await pTimeout(Promise.all(this.running).then(() => true), { milliseconds: graceLeftMs, fallback: () => false });
    if (settled) return;
    this.log.warn({ jobs: this.running.size }, 'grace period over; stopping agents and rolling claims back');
    this.shutdown.abort();
    const ended = await pTimeout(Promise.all(this.running).then(() => true), {
      milliseconds: Math.max(0, this.stopsBy + slackMs - Date.now()),
      fallback: () => false,
    });
    if (!ended) for (const run of this.runs.values()) run.overranTheStop();
  }

  /**
   * Stops listening for cancels and closes NATS, both at once and by `closeBy`: a NATS that does not
   * answer (frozen, partitioned) would hold each of them for the drain's own bound, one after the
   * other, past the process's stop limit. The runtime's own close of the bus after this finds it closed.
   */
  private async closeNats(closeBy: number): Promise<void> {
    const leftMs = Math.max(0, closeBy - Date.now());
    await Promise.all([pTimeout(this.cancellations.stop(), { milliseconds: leftMs, fallback: () => undefined }), this.bus.close(leftMs)]);
  }

  /**
   * The stop begins once, at `at` — the SIGTERM's moment when the process was asked (processStop),
   * else the application's close: no more offers, and its deadline (`stopsBy`, the process's stop limit
   * less a margin) counted from then. Returns when it began.
   */
  private beginStop(at: number): number {
    if (this.stopBegan !== null) return this.stopBegan;
    this.stopBegan = at;
    this.stopsBy = at + this.config.stopLimitMs - stopMarginMs(this.config.stopLimitMs);
    this.deadlineTimer = setTimeout(() => this.stopDeadline.abort(), Math.max(0, this.stopsBy - Date.now()));
    this.stopIntake('shutdown');
    return at;
  }

  private stopIntake(why: string): void {
    if (!this.accepting) return;
    this.accepting = false;
    this.log.info({ runnerId: this.config.runnerId, why }, 'no longer taking offers');
    for (const wake of [...this.sleepers]) wake();
    this.slots.wakeAll();
  }

  /**
   * Agents a SIGKILLed predecessor under this runner id left running would go on writing into its
   * worktrees, and its claims would wait for their leases to expire: both are settled before the
   * first offer is taken, retried until they are (the job service may be starting too). A stop that
   * comes meanwhile lets the settling go on until the stop's deadline, like every other command, and
   * gives it up there — its requests, its wait for the agents and its git alike: what it had not
   * given back is left to its lease, and the log names the agents left running and those claims.
   */
  private async settleEarlierRun(): Promise<void> {
    while (this.accepting) {
      try {
        await settleEarlierRun({
          config: this.config,
          commands: this.commands,
          log: this.partsLog,
          until: () => (this.accepting ? Date.now() + this.config.commandTimeoutMs : 0),
          abandon: this.stopDeadline.signal,
        });
        this.settled = true;
        return;
      } catch (error) {
        if (!this.accepting) {
          const left = error instanceof EarlierRunLeft ? { agentsLeft: error.agentsLeft, claimsLeft: error.claimsLeft } : {};
          this.log.warn(
            { runnerId: this.config.runnerId, error: this.scrub(String(error)), stopping: true, ...left },
            'the earlier run could not be settled before the stop; its claims are left to their leases',
          );
          return;
        }
        const delay = this.intakeBackoff.fail();
        this.log.warn({ error: this.scrub(String(error)), retryInMs: delay }, 'could not settle the claims of an earlier run yet; retrying');
        await this.sleep(delay);
      }
    }
  }

  private async prepareIntake(): Promise<void> {
    while (this.accepting) {
      try {
        await this.intake.ensure(this.config.kinds);
        this.intakeReady = true;
        this.intakeBackoff.succeed();
        return;
      } catch (error) {
        const delay = this.intakeBackoff.fail();
        this.log.warn({ error: this.scrub(String(error)), retryInMs: delay }, 'dispatch consumers not ready; retrying');
        await this.sleep(delay);
      }
    }
  }

  /** Takes offers of one kind while the runner accepts work; a fault of one turn is logged and backed off from, never the end of the intake. */
  private async intakeLoop(kind: JobKind): Promise<void> {
    while (this.accepting) {
      try {
        await this.takeOffer(kind);
      } catch (error) {
        const delay = this.intakeBackoff.fail();
        this.log.error({ kind, error: this.scrub(String(error)), retryInMs: delay }, 'the intake failed unexpectedly; backing off');
        await this.sleep(delay);
      }
    }
  }

  /** Waits for a free place, pulls one offer and starts handling it. */
  private async takeOffer(kind: JobKind): Promise<void> {
    await this.slots.whenFree();
    if (!this.accepting) return;
    const paused = this.intakePausedUntil - Date.now();
    if (paused > 0) {
      await this.sleep(paused);
      return;
    }
    let held: HeldOffer | null;
    try {
      held = await this.intake.next(kind, this.config.offerPollMs);
      this.intakeBackoff.succeed();
    } catch (error) {
      const delay = this.intakeBackoff.fail();
      this.log.warn({ kind, error: this.scrub(String(error)), retryInMs: delay }, 'taking an offer failed; backing off');
      await this.sleep(delay);
      // The consumer or the stream may have been removed: put them back before the next pull.
      await this.intake.ensure([kind]).catch(() => undefined);
      return;
    }
    if (!held || !held.offer) return;
    // Another kind's offer took the last place meanwhile, or the runner stopped: hand it straight back.
    if (!this.accepting || !this.slots.tryAcquire()) {
      held.nak(0);
      return;
    }
    const job: Promise<void> = this.handleOffer(held)
      .catch((error: unknown) => this.log.error({ kind, jobId: held.offer?.jobId, error: this.scrub(String(error)) }, 'offer handling failed unexpectedly'))
      .finally(() => {
        this.slots.release();
        this.running.delete(job);
      });
    this.running.add(job);
  }

  private async handleOffer(held: HeldOffer): Promise<void> {
    const offer = held.offer!;
    const offerId = jobOfferMessageId(offer);
    const fields = { jobId: offer.jobId, attempt: offer.attempt, kind: offer.kind, offer: offerId };
    // A second copy of an offer this runner is handling (the stream drops a re-publish only within its
    // duplicate window): its claim, under the same key, would answer with the claim the first copy
    // holds, and the job would run twice at once in one worktree (docs/jobs.md, "Claims").
    if (this.handling.has(offerId)) {
      this.log.warn(fields, 'offer dropped: this runner is running the job under this offer already');
      held.ack();
      return;
    }
    this.handling.add(offerId);
    // Given back for later: from then on a copy that comes here is the offer itself, not a duplicate.
    let handedBack = false;
    const handBack = (delayMs: number) => {
      handedBack = true;
      this.handling.delete(offerId);
      held.nak(delayMs);
    };
    const keepAlive = setInterval(() => held.working(), Math.max(1000, Math.floor(this.config.offerAckWaitMs / 3)));
    try {
      if (!this.settled) {
        // Claims of an earlier run under this id come first; until they are settled the offer goes back.
        const delay = this.claimBackoff.fail();
        this.log.warn({ ...fields, retryInMs: delay }, 'the earlier run is not settled yet; the offer goes back');
        handBack(delay);
        await this.sleep(delay);
        return;
      }
      let claimed;
      // The job service's leaseExpiresAt is by its clock: the claim's lease is counted on this runner's (claimUnderKey).
      let leaseRunsOutAt: number;
      // Test-only (GANTRY_TEST_HOLD_AT): the job service goes silent before the claim is sent.
      await holdHereIfAsked('runner:claim');
      try {
        const answered = await this.claim(offer, fields);
        const reply = answered.reply;
        leaseRunsOutAt = answered.leaseRunsOutAt;
        if (!reply.claimed) {
          this.log.info(fields, 'offer dropped: the claim went elsewhere');
          held.ack();
          return;
        }
        claimed = reply.job;
      } catch (error) {
        // Offered at the pause's end and claimed on a job service whose clock is a moment behind (or an
        // offer that came early): dropped, the job would wait for the offer sweep and the stream's
        // duplicate window, minutes. Handed back until the pause ends, it is claimed then, here or elsewhere.
        const pauseEnds = claimableFrom(error);
        if (pauseEnds !== null) {
          const delay = untilPauseEndsMs({ notBefore: pauseEnds, afterMs: claimableAfterMs(error) }, Date.now());
          this.log.info({ ...fields, offerNotBefore: pauseEnds, retryInMs: delay }, "claim refused for the job's pause; the offer goes back until it ends");
          handBack(delay);
          return;
        }
        if (isGantryError(error) && LOST_CLAIM_CODES.has(error.code)) {
          this.log.info({ ...fields, code: error.code, error: this.scrub(error.message) }, 'offer dropped: the claim was refused');
          held.ack();
          return;
        }
        const delay = this.claimBackoff.fail();
        this.log.warn({ ...fields, error: this.scrub(String(error)), retryInMs: delay }, 'claim failed; the offer goes back');
        handBack(delay);
        await this.sleep(delay);
        return;
      }
      this.claimBackoff.succeed();
      this.log.info({ ...fields, leaseToken: claimed.leaseToken, leaseExpiresAt: claimed.leaseExpiresAt }, 'job claimed');
      const run = new JobRun(
        claimed,
        {
          config: this.config,
          commands: this.commands,
          log: this.partsLog,
          onTokenExpired: (reason) => this.tokenExpired(reason),
          onAgentNotStarted: (reason) => this.agentNotStarted(reason),
          natsConnected: () => this.bus.connected,
          stopsBy: () => this.stopsBy,
          stopDeadline: this.stopDeadline.signal,
        },
        this.shutdown.signal,
        leaseRunsOutAt,
      );
      this.runs.set(claimed.jobId, run);
      let outcome: JobRunOutcome;
      try {
        outcome = await run.run();
      } finally {
        if (this.runs.get(claimed.jobId) === run) this.runs.delete(claimed.jobId);
      }
      this.logOutcome(outcome, fields);
      this.afterHost(run.hostRefused, fields);
      held.ack();
    } catch (error) {
      this.log.error({ ...fields, error: this.scrub(String(error)) }, 'offer handling failed');
      held.ack();
    } finally {
      clearInterval(keepAlive);
      if (!handedBack) this.handling.delete(offerId);
    }
  }

  /** The claim of an offered job, asked until it is answered or this runner shuts down (claimUnderKey). */
  private claim(offer: JobOffer, fields: Record<string, unknown>): Promise<ClaimAnswered> {
    const request = {
      runnerId: this.config.runnerId,
      kinds: this.config.kinds,
      jobId: offer.jobId,
      leaseDurationMs: this.config.jobLeaseMs,
      idempotencyKey: deriveIdempotencyKey(`${this.config.runnerId}/claim`, { offer: jobOfferMessageId(offer) }),
    };
    return claimUnderKey(this.commands, request, {
      timeoutMs: this.config.commandTimeoutMs,
      correlationId: runCorrelationId(offer),
      abandon: this.stopDeadline.signal,
      stopped: () => this.shutdown.signal.aborted,
      sleep: (ms) => this.sleep(ms),
      onLongUnanswered: (error) =>
        this.log.warn({ ...fields, error: this.scrub(String(error)) }, 'the claim may have been written and got no answer; asking again under its key until it is answered'),
    });
  }

  /**
   * A run its host refused (docs/jobs.md, "Attempts": a path outside the root, a full disk, a worktree
   * service of another version …) spends no attempt, so nothing else would keep a broken host from
   * taking job after job off the queue: it takes no offers for a while, doubling while its runs keep
   * failing so (the runner's backoff); any other end of a run starts the count again.
   */
  private afterHost(refused: boolean, fields: Record<string, unknown>): void {
    if (!refused) {
      this.hostBackoff.succeed();
      return;
    }
    const pauseMs = this.hostBackoff.fail();
    this.intakePausedUntil = Math.max(this.intakePausedUntil, Date.now() + pauseMs);
    this.log.warn({ ...fields, pauseMs, failedInARow: this.hostBackoff.consecutiveFailures }, 'this host failed a job; no offers are taken for a while');
  }

  private tokenExpired(reason: string): void {
    this.agentUnusable = `the agent token expired: ${reason}`;
    this.liveness.markUnhealthy('runner', 'agent token expired');
    this.log.error({ runnerId: this.config.runnerId, reason }, 'agent token expired; this runner takes no more work');
    this.stopIntake('agent token expired');
  }

  /** The agent CLI cannot be started here: every job would fail the same way, whoever's it is. */
  private agentNotStarted(reason: string): void {
    this.agentUnusable = reason;
    this.liveness.markUnhealthy('runner', 'agent cannot be started');
    this.log.error({ runnerId: this.config.runnerId, reason }, 'the agent cannot be started; this runner takes no more work');
    this.stopIntake('agent cannot be started');
  }

  private logOutcome(outcome: JobRunOutcome, fields: Record<string, unknown>): void {
    switch (outcome.kind) {
      case 'finished':
        this.log.info({ ...fields, jobStatus: outcome.reply.jobStatus, agentStarted: outcome.agentStarted }, 'job done on this runner');
        return;
      case 'rolled_back':
        // A rollback's reason may end with what the agent printed.
        this.log.warn({ ...fields, reason: this.scrub(outcome.reason), cause: outcome.cause, agentStarted: outcome.agentStarted }, 'job handed back');
        return;
      case 'cancelled':
        this.log.warn({ ...fields, agentStarted: outcome.agentStarted }, 'job cancelled on this runner');
        return;
      case 'lease_lost':
        this.log.warn({ ...fields, reason: this.scrub(outcome.reason), agentStarted: outcome.agentStarted }, 'job lost');
        return;
    }
  }

  /** A sleep that a shutdown or an expired token cuts short. */
  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.sleepers.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.sleepers.add(done);
    });
  }
}

/**
 * The jobs' log lines carry what the agent printed (a crashed agent's stderr in a rollback's reason)
 * and the errors of its git: scrubbed like the events they also go to, by the values this runner
 * knows to be secret and by the shapes of credentials (docs/configuration.md, "Secrets in events").
 */
function scrubbing(log: ComponentLogger, scrub: SecretScrubber): ComponentLogger {
  return {
    log: (message, fields) => log.log(message, fields && scrubStrings(fields, scrub)),
    warn: (message, fields) => log.warn(message, fields && scrubStrings(fields, scrub)),
    error: (message, fields) => log.error(message, fields && scrubStrings(fields, scrub)),
  };
}
