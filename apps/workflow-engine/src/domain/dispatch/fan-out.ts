/*
 * Who a fan-out wakes (docs/workflow-engine.md, "queue_run_for_each_participant"): the step's
 * template-level and task-level seats merged — the task's row wins a (role, agent profile) collision
 * — ordered by role, position, id, de-duplicated on (role, agent profile) keeping the first, then
 * filtered on the configured role alone (AC-A4, AC-A5, AC-H3). decision_required is not looked at.
 */

export interface Seat {
  participantId: string;
  /** null: declared on the workflow (template level). */
  taskId: string | null;
  role: string;
  agentProfileId: string;
  decisionRequired: boolean;
  position: number;
}

const byEnumeration = (a: Seat, b: Seat) =>
  (a.role < b.role ? -1 : a.role > b.role ? 1 : 0) || a.position - b.position || (a.participantId < b.participantId ? -1 : a.participantId > b.participantId ? 1 : 0);

/** The merged, ordered and de-duplicated seat list of AC-A5 (all roles). */
export function mergedSeats(seats: readonly Seat[]): Seat[] {
  const taskPairs = new Set(seats.filter((s) => s.taskId !== null).map((s) => pairKey(s)));
  // A template row loses to a task row with the same (role, agent profile).
  const merged = seats.filter((s) => s.taskId !== null || !taskPairs.has(pairKey(s))).sort(byEnumeration);
  const seen = new Set<string>();
  return merged.filter((s) => {
    const key = pairKey(s);
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}

/** The seats a fan-out for `role` enqueues a run for, in the order it enqueues them. */
export function fanOutSeats(seats: readonly Seat[], role: string): Seat[] {
  return mergedSeats(seats).filter((s) => s.role === role);
}

function pairKey(s: Seat): string {
  return JSON.stringify([s.role, s.agentProfileId]);
}
