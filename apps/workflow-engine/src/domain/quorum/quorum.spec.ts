import { guardHolds, type QuorumSeat, type RecordedDecision } from './quorum.js';

const seats: QuorumSeat[] = [
  { participantId: 'a', decisionRequired: true },
  { participantId: 'b', decisionRequired: true },
  { participantId: 'c', decisionRequired: true },
  { participantId: 'x', decisionRequired: false },
];
let n = 0;
const d = (participantId: string | null, verdict: 'approve' | 'reject', person = false): RecordedDecision => ({
  decisionId: `d${++n}`,
  participantId,
  verdict,
  decidedBy: person ? { kind: 'person', actor: 'user-1' } : { kind: 'review_job', jobId: 'job-1' },
});
const quorum = (rule: string, decisions: RecordedDecision[], on = seats) => guardHolds({ wait_for_quorum: rule }, on, decisions);

describe('quorum guards', () => {
  it('all_approve: every decision-required seat approved (the latest decision of each counts)', () => {
    expect(quorum('all_approve', [d('a', 'approve'), d('b', 'approve')])).toBe(false);
    expect(quorum('all_approve', [d('a', 'approve'), d('b', 'approve'), d('c', 'approve')])).toBe(true);
    expect(quorum('all_approve', [d('a', 'approve'), d('b', 'approve'), d('c', 'reject'), d('c', 'approve')])).toBe(true);
    expect(quorum('all_approve', [d('a', 'approve'), d('b', 'approve'), d('c', 'approve'), d('c', 'reject')])).toBe(false);
  });

  it('all_decide, any_reject, majority_approve, n_approve:N', () => {
    expect(quorum('all_decide', [d('a', 'approve'), d('b', 'reject'), d('c', 'approve')])).toBe(true);
    expect(quorum('all_decide', [d('a', 'approve'), d('b', 'reject')])).toBe(false);
    expect(quorum('any_reject', [d('a', 'approve'), d('b', 'reject')])).toBe(true);
    expect(quorum('any_reject', [d('x', 'reject')])).toBe(false);
    expect(quorum('majority_approve', [d('a', 'approve'), d('b', 'approve')])).toBe(true);
    expect(quorum('majority_approve', [d('a', 'approve'), d('x', 'approve')])).toBe(false);
    expect(quorum('n_approve:2', [d('a', 'approve'), d('b', 'approve')])).toBe(true);
    expect(quorum('n_approve:2', [d('a', 'approve'), d('b', 'reject')])).toBe(false);
  });

  it('counts only decision-required seats: a vote of a seat without it is ignored', () => {
    expect(quorum('all_approve', [d('a', 'approve'), d('b', 'approve'), d('x', 'reject')])).toBe(false);
    expect(quorum('all_approve', [d('a', 'approve'), d('b', 'approve'), d('c', 'approve'), d('x', 'reject')])).toBe(true);
  });

  it('fails closed when no seat requires a decision', () => {
    const none = [{ participantId: 'x', decisionRequired: false }];
    expect(quorum('all_decide', [d('x', 'approve')], none)).toBe(false);
    expect(quorum('any_reject', [d('x', 'reject')], none)).toBe(false);
  });

  it('requires_approval: the latest decision by a person is an approval', () => {
    expect(guardHolds({ requires_approval: true }, seats, [d(null, 'approve', true)])).toBe(true);
    expect(guardHolds({ requires_approval: true }, seats, [d(null, 'approve', true), d(null, 'reject', true)])).toBe(false);
    expect(guardHolds({ requires_approval: true }, seats, [d('a', 'approve')])).toBe(false);
    expect(guardHolds(null, seats, [])).toBe(true);
  });
});
