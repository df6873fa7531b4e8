import { Sweep, type TickSchedule } from './sweep.js';

/** Ticks by hand: `tick()` is one interval passing. */
function handTicks() {
  let tick: (() => void) | null = null;
  const schedule: TickSchedule = (fn) => {
    tick = fn;
    return { cancel: () => (tick = null) };
  };
  return { schedule, tick: () => tick?.(), get ticking() { return tick !== null; } };
}

/** A pass that waits until it is let go. */
function gatedPasses() {
  const releases: Array<() => void> = [];
  let started = 0;
  let active = 0;
  let mostAtOnce = 0;
  const run = async () => {
    started++;
    active++;
    mostAtOnce = Math.max(mostAtOnce, active);
    await new Promise<void>((resolve) => releases.push(resolve));
    active--;
  };
  return { run, releaseAll: () => releases.splice(0).forEach((r) => r()), get started() { return started; }, get mostAtOnce() { return mostAtOnce; } };
}

const settle = () => new Promise((resolve) => setImmediate(resolve));

function recordingLog() {
  const lines: Array<{ fields: Record<string, unknown>; message: string }> = [];
  return { lines, warn: (fields: Record<string, unknown>, message: string) => void lines.push({ fields, message }) };
}

/** A started sweep of gated passes, its first tick come and its first pass running. */
async function sweepInItsFirstPass() {
  const ticks = handTicks();
  const passes = gatedPasses();
  const sweep = new Sweep({ name: 'test', everyMs: 1000, run: passes.run, log: recordingLog(), schedule: ticks.schedule });
  sweep.start();
  ticks.tick();
  await settle();
  return { ticks, passes, sweep };
}

describe('Sweep', () => {
  it('runs one pass at a time: ticks while a pass runs are skipped', async () => {
    const { ticks, passes, sweep } = await sweepInItsFirstPass();
    ticks.tick();
    ticks.tick();
    await settle();
    expect(passes.started).toBe(1);
    passes.releaseAll();
    await settle();
    ticks.tick();
    await settle();
    expect(passes.started).toBe(2);
    expect(passes.mostAtOnce).toBe(1);
    passes.releaseAll();
    await sweep.stop();
  });

  it('a failed pass is logged with the sweep and the error, and the next tick runs again', async () => {
    const ticks = handTicks();
    const log = recordingLog();
    let calls = 0;
    const sweep = new Sweep({
      name: 'pruning',
      everyMs: 1000,
      log,
      schedule: ticks.schedule,
      run: async () => {
        calls++;
        if (calls === 1) throw new Error('the database went away');
      },
    });
    sweep.start();
    ticks.tick();
    await settle();
    expect(log.lines).toEqual([{ fields: { sweep: 'pruning', error: 'the database went away' }, message: 'sweep failed; the next tick retries' }]);
    ticks.tick();
    await settle();
    expect(calls).toBe(2);
    expect(log.lines).toHaveLength(1);
    await sweep.stop();
  });

  it('a pass that throws before its first await is logged too, never thrown at the caller', async () => {
    const log = recordingLog();
    const sweep = new Sweep({ name: 'sync', everyMs: 1000, log, schedule: handTicks().schedule, run: () => { throw new Error('at once'); } });
    await expect(sweep.runNow()).resolves.toBeUndefined();
    expect(log.lines.map((l) => l.fields.error)).toEqual(['at once']);
  });

  it('stop waits for the pass in flight, and no tick comes after it', async () => {
    const { ticks, passes, sweep } = await sweepInItsFirstPass();
    let stopped = false;
    const stopping = sweep.stop().then(() => (stopped = true));
    await settle();
    expect(stopped).toBe(false);
    expect(ticks.ticking).toBe(false);
    passes.releaseAll();
    await stopping;
    expect(stopped).toBe(true);
    expect(passes.started).toBe(1);
  });

  it('runNow shares the pass already running', async () => {
    const passes = gatedPasses();
    const sweep = new Sweep({ name: 'test', everyMs: 1000, run: passes.run, log: recordingLog(), schedule: handTicks().schedule });
    const first = sweep.runNow();
    const second = sweep.runNow();
    await settle();
    expect(passes.started).toBe(1);
    passes.releaseAll();
    await Promise.all([first, second]);
  });

  it('start with now runs a pass at once, then on the ticks', async () => {
    const ticks = handTicks();
    let calls = 0;
    const sweep = new Sweep({ name: 'test', everyMs: 1000, log: recordingLog(), schedule: ticks.schedule, run: async () => void calls++ });
    sweep.start({ now: true });
    await settle();
    expect(calls).toBe(1);
    ticks.tick();
    await settle();
    expect(calls).toBe(2);
    await sweep.stop();
  });
});
