import { register } from 'prom-client';
import { FAULT_LOG_FIRST_REPEAT_MS, FAULT_LOG_MAX_REPEAT_MS, RecurringFaults } from './recurring-faults.js';

const MINUTE = 60_000;
const standing = async () => (await register.getSingleMetric('gantry_lease_sweep_faulty_leases')?.get())?.values.find((v) => v.labels.sweep === 'worktree-lease')?.value ?? 0;

describe('a fault a sweep meets pass after pass (docs/operations.md, "Periodic sweeps")', () => {
  it('is logged when first found, a minute later, then at intervals doubling up to an hour', () => {
    expect([FAULT_LOG_FIRST_REPEAT_MS, FAULT_LOG_MAX_REPEAT_MS]).toEqual([MINUTE, 60 * MINUTE]);
    const faults = new RecurringFaults('worktree-lease');
    const loggedAt: number[] = [];
    // A pass every second for six hours.
    for (let t = 0; t <= 6 * 60 * MINUTE; t += 1000) {
      faults.passBegins();
      if (faults.failed('job-1:1', t).log) loggedAt.push(t / MINUTE);
      faults.passEnded();
    }
    expect(loggedAt).toEqual([0, 1, 3, 7, 15, 31, 63, 123, 183, 243, 303]);
    faults.clear();
  });

  it('is news again once handled, or once a whole pass did not meet it; the gauge counts those standing', async () => {
    const faults = new RecurringFaults('worktree-lease');
    const before = await standing();
    faults.passBegins();
    expect(faults.failed('a', 0)).toEqual({ log: true, since: 0, failedTries: 1 });
    expect(faults.failed('b', 0).log).toBe(true);
    faults.passEnded();
    expect((await standing()) - before).toBe(2);

    faults.passBegins();
    expect(faults.failed('a', 1000)).toEqual({ log: false, since: 0, failedTries: 2 });
    faults.met('b'); // another replica had it this time
    faults.passEnded();
    expect((await standing()) - before).toBe(2);

    faults.passBegins();
    expect(faults.handled('a')).toEqual({ since: 0, failedTries: 2 });
    faults.passEnded(); // 'b' not met: gone
    expect((await standing()) - before).toBe(0);
    expect(faults.handled('a')).toBeUndefined();

    faults.passBegins();
    expect(faults.failed('b', 5000)).toEqual({ log: true, since: 5000, failedTries: 1 });
    faults.clear();
    expect((await standing()) - before).toBe(0);
  });
});
