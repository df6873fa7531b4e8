import type { Action } from '@gantry/contracts';
import { stepDeclaration } from '../definitions/declaration.js';
import type { StepSeats } from '../task/commands.js';

/** The instant `s` seconds after the story begins. */
const T0 = Date.parse('2026-11-30T08:00:00.000Z');
export const at = (s: number) => new Date(T0 + s * 1000).toISOString();

export const EPOCH = '6f1c2b3a-4d5e-4f60-8a7b-9c0d1e2f3a4b';
export const OTHER_EPOCH = '0a1b2c3d-4e5f-4a6b-8c7d-8e9f0a1b2c3d';
export const SESSION = '2b3c4d5e-6f70-4a81-9b2c-3d4e5f607182';
export const NEW_SESSION = '3c4d5e6f-7081-4a92-8b3c-4d5e6f708192';

export const action = (type: string, config: Record<string, unknown> = {}): Action => ({ type, config, guard: null });

/** A step as an admission sees it: its WIP limit, how many others occupy it, its declaration. */
export function seats(stepId: string, options: { limit?: number | null; occupied?: number; onEnter?: Action[] } = {}): StepSeats {
  const onEnter = options.onEnter ?? [];
  return {
    stepId,
    wipLimit: options.limit ?? null,
    occupied: options.occupied ?? 0,
    declaration: stepDeclaration({ id: stepId, name: stepId, wipLimit: null, prompt: null, agentProfileId: null, participants: [], onEnter, onTurnStart: [], onTurnComplete: [], onExit: [] }),
  };
}
