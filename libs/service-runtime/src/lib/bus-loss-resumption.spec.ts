import type { Bus } from '@gantry/messaging';
import { BusLossResumption } from './bus-loss-resumption.js';

/** The two things BusLossResumption reads of a bus, set by the test (the services' specs cut a real one). */
class BusState {
  connectionLosses = 0;
  connected = true;
  asBus(): Bus {
    return this as unknown as Bus;
  }
}

describe('BusLossResumption', () => {
  it('resumes nothing while no loss was seen, and nothing for the losses there were at its start', async () => {
    const bus = new BusState();
    bus.connectionLosses = 2;
    let runs = 0;
    const resumption = new BusLossResumption(bus.asBus(), async () => void runs++);
    await resumption.settle();
    expect(resumption.pending).toBe(false);
    expect(runs).toBe(0);
  });

  it('runs one resumption per loss for every caller that waits meanwhile, and none again after it', async () => {
    const bus = new BusState();
    let release!: () => void;
    let runs = 0;
    const resumption = new BusLossResumption(bus.asBus(), () => {
      runs++;
      return new Promise<void>((resolve) => (release = resolve));
    });
    bus.connectionLosses = 1;
    expect(resumption.pending).toBe(true);
    let settled = 0;
    const waiting = [resumption.settle(), resumption.settle(), resumption.settle()].map((p) => p.then(() => settled++));
    await new Promise((resolve) => setImmediate(resolve));
    expect(settled).toBe(0);
    release();
    await Promise.all(waiting);
    expect(settled).toBe(3);
    expect(runs).toBe(1);
    expect(resumption.pending).toBe(false);
    await resumption.settle();
    expect(runs).toBe(1);
  });

  it('waits for the bus: while it is down a caller is not held and nothing is resumed', async () => {
    const bus = new BusState();
    let runs = 0;
    const resumption = new BusLossResumption(bus.asBus(), async () => void runs++);
    bus.connectionLosses = 1;
    bus.connected = false;
    await resumption.settle();
    expect(runs).toBe(0);
    expect(resumption.pending).toBe(true);
    bus.connected = true;
    await resumption.settle();
    expect(runs).toBe(1);
  });

  it('a loss during the resumption is resumed for again; a failed resumption is tried again by the next caller', async () => {
    const bus = new BusState();
    let runs = 0;
    let fail = true;
    const resumption = new BusLossResumption(bus.asBus(), async () => {
      runs++;
      if (fail) throw new Error('no database');
      if (runs === 2) bus.connectionLosses = 2;
    });
    bus.connectionLosses = 1;
    await expect(resumption.settle()).rejects.toThrow('no database');
    expect(resumption.pending).toBe(true);
    fail = false;
    await resumption.settle();
    expect(runs).toBe(2);
    // The loss that came during the second run is still owed its resumption.
    expect(resumption.pending).toBe(true);
    await resumption.settle();
    expect(runs).toBe(3);
    expect(resumption.pending).toBe(false);
  });
});
