import { ErrorCode, GantryError } from '@gantry/contracts';
import { eventually } from '@gantry/testing';
import { WorkflowWorld, reviewYaml } from './harness.js';

/*
 * A move_task that meets long on_enter dispatches writing markers to the (task, step) stream the move
 * opens its entry on (docs/architecture.md, "When a stream stays busy"; docs/workflow-engine.md,
 * "Commands and events"). With eight tries at most 50 ms apart, about one move in 30 was answered
 * VERSION_CONFLICT with nothing done, and most of the dispatches gave up on their own markers.
 */
describe('a move into a step whose (task, step) stream a long dispatch keeps appending to', () => {
  const world = new WorkflowWorld('wf_hot_stream');
  const POSITIONS = 100;
  const ROUNDS = 5;
  // Unknown types are claimed and marked skipped back to back: the dispatch appends without a pause.
  const onEnter = Array.from({ length: POSITIONS }, (_, i) => `      - type: note_progress_${i}`).join('\n');

  beforeAll(async () => {
    await world.start();
    await world.importYaml('hot', reviewYaml(onEnter));
  }, 120_000);
  afterAll(() => world.close(), 60_000);

  it('every move back into the step lands while the earlier entries\' dispatches are still marking their positions, and every dispatch finishes', async () => {
    const { taskId } = await world.task('hot');
    const stream = world.pairStream(taskId, 'hot', 'review');
    const failures: string[] = [];
    let contended = 0;
    // a dispatch that stopped on its own markers' stream (scanned again after a pause) gave up too
    const gaveUp = () => world.records().filter((r) => r.message === 'step entry dispatch failed; it resumes at the next start' || (r.rule === 'AC-L3' && r.cause !== undefined));
    const entrySeqs = async () => {
      const events = await world.events(stream);
      const seqs = (type: string) => new Set(events.filter((e) => e.type === type).map((e) => e.data.entrySeq as number));
      return { opened: [...seqs('StepEntryOpened')], ended: seqs('StepEntryTerminated') };
    };
    for (let round = 1; round <= ROUNDS; round++) {
      // The entry before this one is still being dispatched when the move opens the next one.
      const before = await entrySeqs();
      if (before.opened.some((seq) => !before.ended.has(seq))) contended += 1;
      for (const step of ['review', 'work']) {
        try {
          await world.move(taskId, step);
        } catch (error) {
          if (!(error instanceof GantryError) || error.code !== ErrorCode.VERSION_CONFLICT) throw error;
          failures.push(`${step} in round ${round}: ${error.message}`);
        }
      }
      // One long dispatch at a time meets the next move: the ones before the newest are waited for.
      await eventually(
        async () => {
          const { opened, ended } = await entrySeqs();
          const newest = Math.max(0, ...opened);
          return gaveUp().length > 0 || opened.every((seq) => seq === newest || ended.has(seq));
        },
        { what: `the entries before the newest terminal (round ${round})`, timeoutMs: 180_000 },
      );
    }
    // The moves met dispatches still under way (else this test would prove nothing).
    expect(contended).toBeGreaterThan(0);
    expect(failures).toEqual([]);
    const task = await world.getTask(taskId);
    expect(task.placement).toMatchObject({ stepId: 'work', admitted: true });
    // Each entry's dispatch runs to its end: one that gave up would be left to the engine's next start.
    const entries = await eventually(
      async () => {
        const all = await world.entries(taskId, 'review');
        return gaveUp().length > 0 || all.every((e) => e.terminal) ? all : null;
      },
      { what: 'every entry of the step terminal, or a dispatch given up', timeoutMs: 180_000 },
    );
    expect(gaveUp().map((r) => r.error ?? r.cause)).toEqual([]);
    expect(entries.map((e) => [e.entrySeq, e.terminal])).toEqual(Array.from({ length: ROUNDS }, (_, i) => [i + 1, true]));
  }, 900_000);
});
