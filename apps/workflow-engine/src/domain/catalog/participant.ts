import { canonicalJson, ErrorCode, GantryError, type ParticipantEvent, type StepParticipantAddedData } from '@gantry/contracts';

export type { ParticipantEvent };

/** A task-level participant seat at a step (template-level seats are part of the workflow's definition). */

export type ParticipantCommand =
  | { type: 'AddStepParticipant'; data: Omit<StepParticipantAddedData, 'addedAt'> & { now: string } }
  | { type: 'RemoveStepParticipant'; data: { participantId: string; now: string } };

export type ParticipantState = { status: 'ABSENT' } | { status: 'SEATED' | 'REMOVED'; seat: Omit<StepParticipantAddedData, 'addedAt'> };

export const initialParticipantState: ParticipantState = { status: 'ABSENT' };

export function evolveParticipant(state: ParticipantState, event: ParticipantEvent): ParticipantState {
  if (event.type === 'StepParticipantAdded') {
    const { addedAt: _at, ...seat } = event.data;
    return { status: 'SEATED', seat };
  }
  return state.status === 'ABSENT' ? state : { status: 'REMOVED', seat: state.seat };
}

export function decideParticipant(command: ParticipantCommand, state: ParticipantState): ParticipantEvent[] {
  switch (command.type) {
    case 'AddStepParticipant': {
      const { now, ...seat } = command.data;
      if (state.status === 'SEATED') {
        if (canonicalJson(state.seat) === canonicalJson(seat)) return [];
        throw new GantryError(ErrorCode.INVALID_TRANSITION, `participant ${seat.participantId} is seated already, with other settings`, { participantId: seat.participantId });
      }
      if (state.status === 'REMOVED') {
        throw new GantryError(ErrorCode.INVALID_TRANSITION, `participant ${seat.participantId} was removed; seat a new participant id`, { participantId: seat.participantId });
      }
      return [{ type: 'StepParticipantAdded', data: { ...seat, addedAt: now } }];
    }
    case 'RemoveStepParticipant': {
      if (state.status === 'ABSENT') throw new GantryError(ErrorCode.NOT_FOUND, `participant ${command.data.participantId} does not exist`);
      if (state.status === 'REMOVED') return [];
      const { participantId, workflowId, stepId, taskId } = state.seat;
      return [{ type: 'StepParticipantRemoved', data: { participantId, workflowId, stepId, taskId, removedAt: command.data.now } }];
    }
    default:
      return assertNever(command);
  }
}

function assertNever(value: never): never {
  throw new Error(`unhandled participant command ${JSON.stringify(value)}`);
}

export const participantDecider = { initialState: initialParticipantState, decide: decideParticipant, evolve: evolveParticipant };
