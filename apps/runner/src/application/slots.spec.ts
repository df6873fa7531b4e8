import { Slots } from './slots.js';

describe('runner slots', () => {
  it('hands out no more places than its capacity', () => {
    const slots = new Slots(2);
    expect([slots.tryAcquire(), slots.tryAcquire(), slots.tryAcquire()]).toEqual([true, true, false]);
    expect(slots.inUse).toBe(2);
    expect(slots.free).toBe(0);
  });

  it('lets every waiting loop look for an offer once a place is freed, without reserving it for any', async () => {
    const slots = new Slots(1);
    expect(slots.tryAcquire()).toBe(true);
    const woken: string[] = [];
    const a = slots.whenFree().then(() => woken.push('a'));
    const b = slots.whenFree().then(() => woken.push('b'));
    await new Promise((r) => setTimeout(r, 10));
    expect(woken).toEqual([]);
    slots.release();
    await Promise.all([a, b]);
    expect(woken.sort()).toEqual(['a', 'b']);
    // only the first loop whose offer arrives gets the place
    expect([slots.tryAcquire(), slots.tryAcquire()]).toEqual([true, false]);
  });

  it('never counts more free places than it has, however often a place is released', () => {
    const slots = new Slots(1);
    slots.release();
    slots.release();
    expect(slots.free).toBe(1);
    expect([slots.tryAcquire(), slots.tryAcquire()]).toEqual([true, false]);
  });

  it('wakes waiting loops on stop without freeing a place', async () => {
    const slots = new Slots(1);
    slots.tryAcquire();
    const waiting = slots.whenFree();
    slots.wakeAll();
    await waiting;
    expect(slots.free).toBe(0);
  });
});
