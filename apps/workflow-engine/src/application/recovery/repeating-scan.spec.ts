import { setTimeout as sleep } from 'node:timers/promises';
import { RepeatingScan } from './repeating-scan.js';

/** The timers that hold the process open (an unref'd one is not among them). */
const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;

describe('the scan of the stopped entries, repeated after growing pauses (AC-L3)', () => {
  it('runs again while work is left, each pause twice the last within a quarter, up to the longest; a scan that leaves nothing starts the pauses over', async () => {
    let left = 3;
    const delays: number[] = [];
    let scans = 0;
    const scan = new RepeatingScan(async () => { scans += 1; left -= 1; }, () => left > 0, { firstMs: 40, maxMs: 100 }, (delayMs) => delays.push(delayMs));
    scan.request();
    scan.request(); // one waiting covers the second request
    const deadline = Date.now() + 5_000;
    while (left > 0 && Date.now() < deadline) await sleep(10);
    expect(scans).toBe(3);
    expect(delays).toHaveLength(3);
    [40, 80, 100].forEach((pause, i) => {
      expect(delays[i]).toBeGreaterThanOrEqual(pause * 0.75);
      expect(delays[i]).toBeLessThanOrEqual(pause * 1.25);
    });
    await sleep(20);
    left = 1;
    scan.request();
    expect(delays[3]).toBeLessThanOrEqual(40 * 1.25);
    await scan.stop();
  });

  it('the waiting timer does not hold the process open; a stop during the pause leaves none behind, and nothing is scanned after it', async () => {
    let scans = 0;
    const scan = new RepeatingScan(async () => { scans += 1; }, () => true, { firstMs: 200, maxMs: 200 });
    const before = timers();
    scan.request();
    expect(scan.waiting).toBe(true);
    expect(timers()).toBe(before);
    await scan.stop();
    expect(scan.waiting).toBe(false);
    scan.request();
    expect(scan.waiting).toBe(false);
    await sleep(400);
    expect(scans).toBe(0);
  });

  it('a stop during a scan resolves once that scan has ended, and no scan follows it although work is left', async () => {
    let scans = 0;
    let ended = false;
    const scan = new RepeatingScan(async () => { scans += 1; await sleep(300); ended = true; }, () => true, { firstMs: 10, maxMs: 10 });
    scan.request();
    while (scans === 0) await sleep(5);
    await scan.stop();
    expect(ended).toBe(true);
    expect(scan.waiting).toBe(false);
    await sleep(100);
    expect(scans).toBe(1);
  });
});
