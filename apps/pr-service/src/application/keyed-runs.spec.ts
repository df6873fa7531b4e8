import { eventually } from '@gantry/testing';
import { KeyedRuns } from './keyed-runs.js';

/*
 * The runs of the reconciler and of the webhook intake: asks for later (a read again after GitHub's
 * 409, a mergeability still computed, a failed run's growing wait) meet on one key. The sooner one
 * decides when the key runs: a failed run's wait of a minute must not postpone the read a second
 * after a 409 (docs/pr-service.md, PR-11, PR-14).
 */
describe('KeyedRuns', () => {
  const TEN_MINUTES = 600_000;

  function runs() {
    const ran: string[] = [];
    const keyed = new KeyedRuns(2, async (key) => void ran.push(key), () => undefined);
    return { ran, keyed };
  }

  it('an ask for sooner, after one for later, runs the key at the sooner time', async () => {
    const { ran, keyed } = runs();
    try {
      keyed.ask('pr-1', TEN_MINUTES);
      keyed.ask('pr-1', 50);
      await eventually(() => ran.length > 0, { what: 'pr-1 run at the sooner ask' });
      expect(ran).toEqual(['pr-1']);
    } finally {
      await keyed.stop();
    }
  });

  it('an ask for later, after one for sooner, does not postpone the key', async () => {
    const { ran, keyed } = runs();
    try {
      keyed.ask('pr-2', 50);
      keyed.ask('pr-2', TEN_MINUTES);
      await eventually(() => ran.length > 0, { what: 'pr-2 run at the first ask' });
      expect(ran).toEqual(['pr-2']);
    } finally {
      await keyed.stop();
    }
  });
});
