import { action } from '../testing/fixtures.js';
import { declarationDigest, markedPositions, needsStepEntryRecord } from './declaration.js';

describe('the on_enter declaration', () => {
  const declared = [action('reset_agent_context'), action('clear_decisions'), action('queue_run_for_each_participant', { role: 'reviewer' })];

  it('marks every position that is not session-owned, by its index in the whole list', () => {
    expect(markedPositions(declared)).toEqual([
      { position: 1, kind: 'clear_decisions' },
      { position: 2, kind: 'queue_run_for_each_participant' },
    ]);
    expect(markedPositions([action('send_slack_message')])).toEqual([{ position: 0, kind: 'send_slack_message' }]);
  });

  it('needs a step-entry record only when something is marked (not for session-only or empty lists)', () => {
    expect(needsStepEntryRecord([])).toBe(false);
    expect(needsStepEntryRecord([action('reset_agent_context'), action('auto_start_agent')])).toBe(false);
    expect(needsStepEntryRecord(declared)).toBe(true);
  });

  it('the digest changes with an inserted action of the same kind, a removed one, or a reorder', () => {
    const digest = declarationDigest(declared);
    expect(declarationDigest([declared[0]!, declared[1]!, action('clear_decisions'), declared[2]!])).not.toBe(digest);
    expect(declarationDigest([declared[0]!, declared[2]!])).not.toBe(digest);
    expect(declarationDigest([declared[1]!, declared[0]!, declared[2]!])).not.toBe(digest);
  });

  it('the digest does not change with an action config (kinds and order only)', () => {
    const reconfigured = [declared[0]!, declared[1]!, action('queue_run_for_each_participant', { role: 'approver', reason: 'x' })];
    expect(declarationDigest(reconfigured)).toBe(declarationDigest(declared));
    expect(declarationDigest(declared)).toMatch(/^[0-9a-f]{64}$/);
  });
});
