import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import type { INestApplication } from '@nestjs/common';
import { acquireWorktree, eventSubject, GantryError, JobClaimed, jobExampleIds, type EventEnvelope, type WorktreeLeaseGrant } from '@gantry/contracts';
import { Readiness } from '@gantry/service-runtime';
import { createTestWorld, startInProcess as startModule, type TestWorld as BaseWorld } from '@gantry/service-runtime/testing';
import { eventually } from '@gantry/testing';
import { AppModule } from '../../app.module.js';
import { createGitFixture, type GitFixture } from '@gantry/git/testing';

/*
 * One test file's world: its own schema, subject root and stream prefix, a real git origin with
 * commits, a worktree root, a command client, and a publisher of job events shaped exactly as the
 * job service's relay publishes them.
 */
export interface TestWorld extends BaseWorld {
  git: GitFixture;
  /** The GANTRY_WORKTREE_ROOT of the service under test. */
  root: string;
  env(extra?: Record<string, string>): Record<string, string>;
  /** Publishes a job event as the job service's relay would; resolves with its envelope. */
  publishJobEvent(type: string, jobId: string, data: Record<string, unknown>): Promise<EventEnvelope>;
  claimJob(jobId: string, leaseToken?: number): Promise<void>;
  count(sql: string, params?: unknown[]): Promise<number>;
}

export const newJobId = (): string => `job-${randomUUID()}`;

export async function createWorld(label: string): Promise<TestWorld> {
  const base = await createTestWorld(label);
  const { name, naming, bus, db } = base;
  const git = createGitFixture();
  const root = `${git.dir}/worktree-root`;
  const versions = new Map<string, number>();
  let position = 1000;
  const world: TestWorld = {
    ...base,
    git,
    root,
    env: (extra = {}) => ({
      GANTRY_DB_SCHEMA: name,
      GANTRY_SUBJECT_ROOT: naming.subjectRoot,
      GANTRY_STREAM_PREFIX: naming.streamPrefix,
      GANTRY_WORKTREE_ROOT: root,
      GANTRY_WORKTREE_SWEEP_INTERVAL_MS: '200',
      ...extra,
    }),
    async publishJobEvent(type, jobId, data) {
      await bus.ensureEventStream('jobs');
      const streamVersion = (versions.get(jobId) ?? 0) + 1;
      versions.set(jobId, streamVersion);
      const envelope: EventEnvelope = {
        eventId: randomUUID(),
        type,
        schemaVersion: 1,
        streamId: jobId,
        streamVersion,
        position: ++position,
        occurredAt: new Date().toISOString(),
        correlationId: `test-${jobId}`,
        causationId: null,
        idempotencyKey: null,
        actor: null,
        data,
      };
      await bus.js.publish(eventSubject(naming, 'jobs', type, jobId), JSON.stringify(envelope), { msgID: envelope.eventId });
      return envelope;
    },
    async claimJob(jobId, leaseToken = 1) {
      await world.publishJobEvent('JobClaimed', jobId, { ...JobClaimed.examples.valid[0], jobId, leaseToken, runnerId: jobExampleIds.runnerId });
    },
    async count(sql, params = []) {
      return Number((await db.query(sql, params)).rows[0].n);
    },
    async close() {
      await base.close();
      git.cleanup();
    },
  };
  return world;
}

/** The worktree service in this process on the world's schema, naming and root; resolves once /ready would say ready. */
export async function startInProcess(world: TestWorld, env: Record<string, string> = {}): Promise<INestApplication> {
  const app = await startModule(AppModule, world, world.env(env));
  const readiness = app.get(Readiness);
  await eventually(async () => (await readiness.evaluate()).ready, { what: 'worktree service ready', timeoutMs: 30_000 });
  return app;
}

/** A job whose claim the service has seen (so a stale reset keeps its lease). */
export async function claimedJob(world: TestWorld, leaseToken = 1): Promise<string> {
  const jobId = newJobId();
  await world.claimJob(jobId, leaseToken);
  await eventually(async () => (await world.count(`SELECT count(*) AS n FROM job_statuses WHERE job_id = $1`, [jobId])) === 1, {
    what: `job ${jobId} known to the worktree service`,
  });
  return jobId;
}

/** Acquires a worktree of `branch` of the world's origin for a job the service has seen claimed (claimedJob). */
export async function acquireForClaimedJob(world: TestWorld, branch: string, timeoutMs = 60_000): Promise<WorktreeLeaseGrant> {
  return world.client.request(
    acquireWorktree,
    { jobId: await claimedJob(world), jobLeaseToken: 1, repositoryUrl: world.git.origin, branch, baseRef: 'main', leaseDurationMs: 600_000, idempotencyKey: `acquire:${randomUUID()}` },
    { timeoutMs },
  );
}

/** The GantryError a command was refused with; fails the test when it was answered instead. */
export async function refusal(promise: Promise<unknown>): Promise<GantryError> {
  const outcome = await promise.then(
    (value) => new Error(`expected a refusal, got ${JSON.stringify(value)}`),
    (error: unknown) => error,
  );
  expect(outcome).toBeInstanceOf(GantryError);
  return outcome as GantryError;
}
