import type { Guard, QuorumRule, Verdict } from '@gantry/contracts';

/*
 * Guards of transitions (docs/workflow-engine.md, "Quorum"). A quorum counts the step's seats with
 * decision_required — template and task level, one per participant id — and each seat's latest decision
 * since the last clear. An empty set of required seats never satisfies a quorum (it fails closed).
 */

export interface QuorumSeat {
  participantId: string;
  decisionRequired: boolean;
}

export interface RecordedDecision {
  decisionId: string;
  participantId: string | null;
  verdict: Verdict;
  decidedBy: { kind: 'person'; actor: string } | { kind: 'review_job'; jobId: string };
}

export interface QuorumCount {
  required: number;
  approvals: number;
  rejections: number;
  decided: number;
}

/** The latest verdict of each decision-required seat, counted. Decisions are in the order they were recorded. */
export function countQuorum(seats: readonly QuorumSeat[], decisions: readonly RecordedDecision[]): QuorumCount {
  const required = seats.filter((s) => s.decisionRequired);
  const latest = new Map<string, Verdict>();
  for (const d of decisions) if (d.participantId !== null) latest.set(d.participantId, d.verdict);
  let approvals = 0;
  let rejections = 0;
  let decided = 0;
  for (const seat of required) {
    const verdict = latest.get(seat.participantId);
    if (verdict === undefined) continue;
    decided++;
    if (verdict === 'approve') approvals++;
    else rejections++;
  }
  return { required: required.length, approvals, rejections, decided };
}

export function quorumHolds(rule: QuorumRule, count: QuorumCount): boolean {
  if (count.required === 0) return false;
  switch (rule) {
    case 'all_approve':
      return count.approvals === count.required;
    case 'all_decide':
      return count.decided === count.required;
    case 'any_reject':
      return count.rejections > 0;
    case 'majority_approve':
      return count.approvals * 2 > count.required;
    default: {
      const n = Number(/^n_approve:(\d+)$/.exec(rule)?.[1]);
      if (!Number.isInteger(n) || n < 1) throw new RangeError(`unknown quorum rule ${rule}`);
      return count.approvals >= n;
    }
  }
}

/** A transition's guard; no guard always holds. requires_approval: the latest decision by a person is an approval. */
export function guardHolds(guard: Guard | null, seats: readonly QuorumSeat[], decisions: readonly RecordedDecision[]): boolean {
  if (guard === null) return true;
  if ('wait_for_quorum' in guard) return quorumHolds(guard.wait_for_quorum, countQuorum(seats, decisions));
  const byPeople = decisions.filter((d) => d.decidedBy.kind === 'person');
  return byPeople.length > 0 && byPeople[byPeople.length - 1]!.verdict === 'approve';
}

/** Whether a guard is one a newly recorded decision can change (so a decision re-evaluates it). */
export function isDecisionGuard(guard: Guard | null): boolean {
  return guard !== null;
}

/**
 * The seats a quorum counts: every seat of the step, not de-duplicated on (role, agent profile)
 * (unlike a fan-out's), but one per participant id. A decision names its seat by that id, so a
 * task-level seat and a template seat that share it (a workflow re-imported with the id after the
 * task's seat was added) are one seat to the count, or one decision would count twice; the task's
 * row wins, as in a fan-out's merge (AC-A5).
 */
export function quorumSeatsOf(seats: readonly { participantId: string; taskId: string | null; decisionRequired: boolean }[]): QuorumSeat[] {
  const byId = new Map<string, { taskId: string | null; decisionRequired: boolean }>();
  for (const s of seats) {
    const seen = byId.get(s.participantId);
    if (seen === undefined || (seen.taskId === null && s.taskId !== null)) byId.set(s.participantId, s);
  }
  return [...byId].map(([participantId, s]) => ({ participantId, decisionRequired: s.decisionRequired }));
}
