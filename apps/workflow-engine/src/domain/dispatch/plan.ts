import { isEngineActionType, isSessionActionType, type Action, type EntryPath, type SessionActionType } from '@gantry/contracts';

/*
 * The order in which one dispatch takes a step's on_enter actions, and who executes each
 * (docs/workflow-engine.md, "The on_enter plan"):
 * - On every entry path but switch_workflow, reset_agent_context goes first and configure_session
 *   second, auto_start_agent last, everything else in declared order between them (AC-A9, AC-A12).
 * - On switch_workflow the declared order holds with no hoisting, and configure_session has no
 *   executor there: it is warned about, naming the path (AC-A2(ii), AC-A6, AC-A13).
 * - reset_agent_context and configure_session take effect at most once per entry however often they
 *   are declared (AC-H8); every other repeated declaration runs once per declaration (AC-H4).
 */

export type PlanItem =
  /** Recorded on the task's agent session; holds no marker (AC-B8). */
  | { owner: 'session'; position: number; type: SessionActionType; action: Action }
  /** Under a durable per-entry marker: an engine-owned type, or a type the engine does not know. */
  | { owner: 'engine'; position: number; type: string; action: Action; known: boolean }
  /** Declared, but nobody executes this type on this entry path (configure_session on switch_workflow). */
  | { owner: 'none'; position: number; type: string; action: Action };

const HOISTED_FIRST: SessionActionType[] = ['reset_agent_context', 'configure_session'];

export function hoistsSessionActions(path: EntryPath): boolean {
  return path !== 'switch_workflow';
}

export function onEnterPlan(onEnter: readonly Action[], path: EntryPath): PlanItem[] {
  const items: PlanItem[] = onEnter.map((action, position) => itemFor(action, position, path));
  const seen = new Set<string>();
  // AC-H8: later declarations of these two are not executed (and not reported: declaring them twice is legal).
  const once = items.filter((item) => {
    if (item.owner !== 'session' || !HOISTED_FIRST.includes(item.type)) return true;
    if (seen.has(item.type)) return false;
    seen.add(item.type);
    return true;
  });
  if (!hoistsSessionActions(path)) return once;
  const first = HOISTED_FIRST.flatMap((type) => once.filter((i) => i.owner === 'session' && i.type === type));
  const last = once.filter((i) => i.owner === 'session' && i.type === 'auto_start_agent');
  const middle = once.filter((i) => !first.includes(i) && !last.includes(i));
  return [...first, ...middle, ...last];
}

function itemFor(action: Action, position: number, path: EntryPath): PlanItem {
  if (isSessionActionType(action.type)) {
    if (action.type === 'configure_session' && !hoistsSessionActions(path)) return { owner: 'none', position, type: action.type, action };
    return { owner: 'session', position, type: action.type, action };
  }
  return { owner: 'engine', position, type: action.type, action, known: isEngineActionType(action.type) };
}
