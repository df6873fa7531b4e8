import { fanOutSeats, type Seat } from './fan-out.js';

const seat = (participantId: string, over: Partial<Seat> = {}): Seat => ({ participantId, taskId: null, role: 'reviewer', agentProfileId: `profile-${participantId}`, decisionRequired: true, position: 0, ...over });

describe('who a fan-out wakes', () => {
  it('AC-A4: one run per distinct seat of the role, none for other roles', () => {
    const seats = [seat('a'), seat('b', { position: 1 }), seat('c', { role: 'approver' })];
    expect(fanOutSeats(seats, 'reviewer').map((s) => s.participantId)).toEqual(['a', 'b']);
    expect(fanOutSeats(seats, 'approver').map((s) => s.participantId)).toEqual(['c']);
    expect(fanOutSeats(seats, 'nobody')).toEqual([]);
  });

  it('AC-A5: template and task seats merged, the task row winning a (role, profile) collision, in role / position / id order, de-duplicated keeping the first', () => {
    const seats = [
      seat('t2', { position: 2, agentProfileId: 'p2' }),
      seat('t1', { position: 1, agentProfileId: 'p1' }),
      seat('task-1', { taskId: 'T-1', position: 5, agentProfileId: 'p1' }),
      seat('dup-b', { position: 3, agentProfileId: 'p3' }),
      seat('dup-a', { position: 3, agentProfileId: 'p3' }),
      seat('a-role', { role: 'approver', position: 0, agentProfileId: 'p1' }),
    ];
    expect(fanOutSeats(seats, 'reviewer').map((s) => s.participantId)).toEqual(['t2', 'dup-a', 'task-1']);
  });

  it('AC-H3: selects by role alone, whatever decision_required says', () => {
    expect(fanOutSeats([seat('a', { decisionRequired: false }), seat('b', { position: 1 })], 'reviewer').map((s) => s.participantId)).toEqual(['a', 'b']);
  });

  it('keeps a seat with no agent profile (the fan-out reports it as a failure, AC-E2)', () => {
    expect(fanOutSeats([seat('a', { agentProfileId: '' })], 'reviewer').map((s) => s.participantId)).toEqual(['a']);
  });
});
