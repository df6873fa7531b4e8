import { enqueue, freeLock, grant, handOver, overdueWaiters, releaseHolder, requestLock, withoutWaiter } from './lock.js';

const at = (s: number) => new Date(Date.parse('2026-11-30T06:00:00.000Z') + s * 1000).toISOString();

describe('the lock of a worktree key', () => {
  const held = grant(freeLock, 'a');
  const line = enqueue(enqueue(enqueue(held, { leaseId: 'b', deadline: at(10) }), { leaseId: 'c', deadline: at(30) }), { leaseId: 'd', deadline: at(20) });

  it('is granted at once only when no one holds it and no one waits', () => {
    expect(requestLock(freeLock, { leaseId: 'a', deadline: at(5) }, at(0))).toEqual({ kind: 'granted' });
    expect(requestLock(held, { leaseId: 'b', deadline: at(5) }, at(0))).toEqual({ kind: 'queued', position: 1 });
    expect(requestLock(line, { leaseId: 'e', deadline: at(50) }, at(0))).toEqual({ kind: 'queued', position: 4 });
  });

  it('times out at once an acquirer whose deadline is now', () => {
    expect(requestLock(held, { leaseId: 'b', deadline: at(0) }, at(0))).toEqual({ kind: 'timed_out' });
  });

  it('goes to the first waiter in arrival order, not the one with the latest deadline', () => {
    expect(handOver(line, at(1))).toEqual({ next: { leaseId: 'b', deadline: at(10) }, timedOut: [] });
  });

  it('skips waiters whose deadline passed, and times them out', () => {
    expect(handOver(line, at(25))).toEqual({ next: { leaseId: 'c', deadline: at(30) }, timedOut: [{ leaseId: 'b', deadline: at(10) }] });
    expect(handOver(line, at(30))).toEqual({
      next: null,
      timedOut: [
        { leaseId: 'b', deadline: at(10) },
        { leaseId: 'c', deadline: at(30) },
        { leaseId: 'd', deadline: at(20) },
      ],
    });
  });

  it('lists the overdue waiters wherever they stand in line', () => {
    expect(overdueWaiters(line, at(20)).map((w) => w.leaseId)).toEqual(['b', 'd']);
  });

  it('moves a granted waiter out of the line and frees only for its holder', () => {
    const next = grant(releaseHolder(line, 'a'), 'b');
    expect(next.holder).toBe('b');
    expect(next.waiters.map((w) => w.leaseId)).toEqual(['c', 'd']);
    expect(releaseHolder(next, 'a').holder).toBe('b');
    expect(withoutWaiter(next, 'c').waiters.map((w) => w.leaseId)).toEqual(['d']);
  });
});
