import type { EntryPath } from '@gantry/contracts';
import { action } from '../testing/fixtures.js';
import { onEnterPlan } from './plan.js';

const order = (declared: ReturnType<typeof action>[], path: EntryPath) => onEnterPlan(declared, path).map((i) => `${i.owner}:${i.type}`);
const hoisting: EntryPath[] = ['turn_complete', 'manual_move', 'return_to_todo', 'wip_promotion', 'wip_promotion_in_place', 'task_update', 'task_start'];

describe('the on_enter plan', () => {
  // AC-A9's verification shape: clear before reset, auto_start before clear.
  const declared = [action('auto_start_agent'), action('clear_decisions'), action('reset_agent_context')];

  it.each(hoisting)('on %s: reset_agent_context first, configure_session second, auto_start_agent last (AC-A9)', (path) => {
    expect(order([...declared, action('configure_session', { model: 'm' })], path)).toEqual([
      'session:reset_agent_context',
      'session:configure_session',
      'engine:clear_decisions',
      'session:auto_start_agent',
    ]);
  });

  it('on switch_workflow: declared order, no hoisting, and configure_session has no executor there (AC-A2(ii), AC-A13)', () => {
    expect(order([...declared, action('configure_session')], 'switch_workflow')).toEqual([
      'session:auto_start_agent',
      'engine:clear_decisions',
      'session:reset_agent_context',
      'none:configure_session',
    ]);
  });

  it('covers the same actions on every path; only the order differs (AC-A2)', () => {
    const covered = (path: EntryPath) => onEnterPlan(declared, path).map((i) => i.position).sort();
    for (const path of [...hoisting, 'switch_workflow' as const]) expect(covered(path)).toEqual([0, 1, 2]);
  });

  it('keeps declared order across owners for interleaved actions (AC-A12): set_session_mode, clear_decisions, enable_plan_mode', () => {
    const interleaved = [action('set_session_mode', { mode: 'plan' }), action('clear_decisions'), action('enable_plan_mode'), action('queue_run', { target: 'primary' })];
    expect(order(interleaved, 'manual_move')).toEqual(['session:set_session_mode', 'engine:clear_decisions', 'session:enable_plan_mode', 'engine:queue_run']);
  });

  it('runs reset_agent_context and configure_session once however often declared, every other repeat once per declaration (AC-H4, AC-H8)', () => {
    const repeated = [action('reset_agent_context'), action('queue_run_for_each_participant', { role: 'r' }), action('reset_agent_context'), action('configure_session'), action('configure_session'), action('queue_run_for_each_participant', { role: 'r' })];
    expect(onEnterPlan(repeated, 'manual_move').map((i) => [i.type, i.position])).toEqual([
      ['reset_agent_context', 0],
      ['configure_session', 3],
      ['queue_run_for_each_participant', 1],
      ['queue_run_for_each_participant', 5],
    ]);
    // On switch_workflow no configure_session executes at all: each declaration is one that reaches no executor.
    expect(onEnterPlan(repeated, 'switch_workflow').map((i) => [i.owner, i.type, i.position])).toEqual([
      ['session', 'reset_agent_context', 0],
      ['engine', 'queue_run_for_each_participant', 1],
      ['none', 'configure_session', 3],
      ['none', 'configure_session', 4],
      ['engine', 'queue_run_for_each_participant', 5],
    ]);
  });

  it('puts an unknown type under a marker like the engine-owned ones', () => {
    expect(onEnterPlan([action('send_slack_message')], 'manual_move')).toEqual([
      { owner: 'engine', position: 0, type: 'send_slack_message', action: action('send_slack_message'), known: false },
    ]);
  });
});
