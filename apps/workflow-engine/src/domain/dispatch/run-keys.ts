import { canonicalHash, deriveIdempotencyKey } from '@gantry/contracts';

/*
 * The idempotency keys of the runs the engine queues in the job service (docs/workflow-engine.md,
 * "Runs"). A key names one intended run: the same run asked for again (a replay, a recovery) carries
 * the same key and the job service answers with the existing job; a different run never shares one.
 */

/** The literal reason of a fan-out or queue_run that declares none (AC-H1). */
export const DEFAULT_RUN_REASON = 'on_enter';

export interface RunConfig {
  role?: string;
  reason: string;
  /** null: the run carries no payload (AC-H2). */
  payload: Record<string, unknown> | null;
  target?: string;
}

/** A declared config with its defaults applied: what the configuration digest is computed over (AC-H7). */
export function canonicalRunConfig(type: string, config: Record<string, unknown>): RunConfig {
  const reason = typeof config.reason === 'string' && config.reason !== '' ? config.reason : DEFAULT_RUN_REASON;
  const payload = config.payload && typeof config.payload === 'object' ? (config.payload as Record<string, unknown>) : null;
  if (type === 'queue_run') return { target: String(config.target), reason, payload };
  return { role: typeof config.role === 'string' ? config.role : '', reason, payload };
}

/** The canonical configuration digest: sorted keys, defaults applied, only the fields named in AC-H7. */
export function configDigest(config: RunConfig): string {
  return canonicalHash(config);
}

/** The key scope of a product's runs: the product id in the characters a key scope allows. */
function productScope(productId: string, purpose: string): string {
  return `${productId.replace(/_/g, '-')}/${purpose}`;
}

export interface EntryRunIdentity {
  productId: string;
  taskId: string;
  workflowId: string;
  stepId: string;
  entrySeq: number;
  /** The action's position in the whole declared on_enter list. */
  position: number;
  agentProfileId: string;
  configDigest: string;
}

/**
 * AC-B1: the entry identity, the step and task, the declared position, the target agent profile and
 * the canonical config digest. Two entries differ in entrySeq, two declarations in position, so
 * neither is ever taken for a replay of the other.
 */
export function entryRunKey(identity: EntryRunIdentity): string {
  return deriveIdempotencyKey(productScope(identity.productId, 'on-enter'), { ...identity });
}

/** A run queued by a trigger other than on_enter: keyed by the event that fired the trigger. */
export function triggerRunKey(identity: { productId: string; taskId: string; trigger: string; cause: string; position: number; agentProfileId: string; configDigest: string }): string {
  return deriveIdempotencyKey(productScope(identity.productId, 'trigger'), { ...identity });
}

/**
 * run_code_review is at-most-once per entry in normal operation and at-least-once across a crash
 * (AC-A8): on on_enter its key carries the attempt, a fresh id per execution, so a recovery after a
 * crash between the launch and its marker launches again rather than being suppressed. On another
 * trigger (no marker) the attempt is the firing event: that event handled again is the same pass.
 */
export function codeReviewRunKey(identity: { productId: string; taskId: string; workflowId: string; stepId: string; entrySeq: number; position: number; attemptId: string }): string {
  return deriveIdempotencyKey(productScope(identity.productId, 'code-review'), { ...identity });
}

/**
 * auto_start_agent's job: on on_enter one per entry and declaration, so a replayed dispatch of the
 * same command does not start it twice; on another trigger one per firing event too (`firedBy`), like
 * every trigger run — else each later turn's start would be taken for a repeat of the first.
 */
export function autoStartRunKey(
  identity: { productId: string; taskId: string; workflowId: string; stepId: string; entrySeq: number; position: number },
  firedBy?: { trigger: string; cause: string },
): string {
  return deriveIdempotencyKey(productScope(identity.productId, 'auto-start'), firedBy ? { ...identity, ...firedBy } : { ...identity });
}

/**
 * The session id a reset_agent_context on a trigger other than on_enter draws: derived from the
 * event that fired the trigger and the action's position, so that event handled again (redelivered
 * after a crash, handed back) draws the same one and the reset takes effect once. A UUID in the
 * version-4 layout, as the agent's command line takes it.
 */
export function triggerSessionId(parts: { taskId: string; trigger: string; cause: string; position: number }): string {
  const h = canonicalHash(['reset_agent_context', parts.taskId, parts.trigger, parts.cause, parts.position]);
  const variant = ((parseInt(h[16]!, 16) & 0x3) | 0x8).toString(16);
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-${variant}${h.slice(17, 20)}-${h.slice(20, 32)}`;
}
