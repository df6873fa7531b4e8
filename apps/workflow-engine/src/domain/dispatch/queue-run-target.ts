import type { Seat } from './fan-out.js';
import { mergedSeats } from './fan-out.js';

/*
 * The target of a queue_run, resolved the same way under every trigger (AC-A7):
 * `primary` (the task's own agent), `workspace.ceo_agent` (the workflow's CEO agent),
 * `participant_role:<role>` (the first seat of that role in enumeration order),
 * `agent_profile_id:<id>` (that profile).
 */

export type TargetResolution = { ok: true; agentProfileId: string; participantId: string | null } | { ok: false; cause: string };

export function resolveQueueRunTarget(
  target: string,
  context: { primaryAgentProfileId: string | null; ceoAgentProfileId: string | null; seats: readonly Seat[] },
): TargetResolution {
  if (target === 'primary') {
    return context.primaryAgentProfileId ? { ok: true, agentProfileId: context.primaryAgentProfileId, participantId: null } : { ok: false, cause: 'the task has no primary agent profile' };
  }
  if (target === 'workspace.ceo_agent') {
    return context.ceoAgentProfileId ? { ok: true, agentProfileId: context.ceoAgentProfileId, participantId: null } : { ok: false, cause: 'the workflow names no CEO agent profile' };
  }
  if (target.startsWith('participant_role:')) {
    const role = target.slice('participant_role:'.length);
    const seat = mergedSeats(context.seats).find((s) => s.role === role);
    if (!seat) return { ok: false, cause: `no participant of role ${role} at this step` };
    if (seat.agentProfileId === '') return { ok: false, cause: `participant ${seat.participantId} of role ${role} has no agent profile` };
    return { ok: true, agentProfileId: seat.agentProfileId, participantId: seat.participantId };
  }
  if (target.startsWith('agent_profile_id:')) {
    return { ok: true, agentProfileId: target.slice('agent_profile_id:'.length), participantId: null };
  }
  return { ok: false, cause: `unknown queue_run target ${target}` };
}
