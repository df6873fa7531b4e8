import { Slots } from './slots.js';

describe('runner slots', () => {
  it('hands out no more slots than its capacity and gives a released one to the longest waiter', async () => {
    const slots = new Slots(2);
    await slots.acquire();
    await slots.acquire();
    expect(slots.inUse).toBe(2);
    const order: string[] = [];
    const first = slots.acquire().then(() => order.push('first'));
    const second = slots.acquire().then(() => order.push('second'));
    await new Promise((r) => setTimeout(r, 10));
    expect(order).toEqual([]);
    slots.release();
    await first;
    expect(order).toEqual(['first']);
    slots.release();
    await second;
    expect(order).toEqual(['first', 'second']);
    expect(slots.inUse).toBe(2);
  });

  it('never counts more free slots than it has, however often a slot is released', () => {
    const slots = new Slots(1);
    slots.release();
    slots.release();
    expect(slots.inUse).toBe(0);
    void slots.acquire();
    expect(slots.inUse).toBe(1);
  });
});
