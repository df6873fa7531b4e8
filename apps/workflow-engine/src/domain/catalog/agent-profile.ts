import type { AgentProfileEvent } from '@gantry/contracts';

export type { AgentProfileEvent };

/** An agent profile: what a REVIEW job queued for it runs with. Registering it again with other values updates it. */
export type AgentProfileCommand = { type: 'RegisterAgentProfile'; data: { agentProfileId: string; model: string; thinkingBudget: number; now: string } };
export type AgentProfileState = { status: 'ABSENT' } | { status: 'REGISTERED'; agentProfileId: string; model: string; thinkingBudget: number };

export const initialAgentProfileState: AgentProfileState = { status: 'ABSENT' };

export function evolveAgentProfile(_state: AgentProfileState, event: AgentProfileEvent): AgentProfileState {
  const d = event.data;
  return { status: 'REGISTERED', agentProfileId: d.agentProfileId, model: d.model, thinkingBudget: d.thinkingBudget };
}

export function decideAgentProfile(command: AgentProfileCommand, state: AgentProfileState): AgentProfileEvent[] {
  const d = command.data;
  if (state.status === 'REGISTERED' && state.model === d.model && state.thinkingBudget === d.thinkingBudget) return [];
  return [{ type: 'AgentProfileRegistered', data: { agentProfileId: d.agentProfileId, model: d.model, thinkingBudget: d.thinkingBudget, registeredAt: d.now } }];
}

export const agentProfileDecider = { initialState: initialAgentProfileState, decide: decideAgentProfile, evolve: evolveAgentProfile };
