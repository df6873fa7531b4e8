import { ErrorCode, listStepEntries, type RequestOf, type StepEntryView } from '@gantry/contracts';
import { readAllPages } from '@gantry/messaging';
import { eventually } from '@gantry/testing';
import { WorkflowWorld } from './harness.js';

/*
 * list_step_entries answers in pages bounded by count and by bytes, read on with a cursor, in
 * (workflow, step, entrySeq) order (docs/workflow-engine.md, "Step entries"; docs/architecture.md,
 * "Paged queries"). The engine and the job service run as processes on real PostgreSQL and NATS.
 */
describe('list_step_entries in pages', () => {
  const world = new WorkflowWorld('wf_paging');
  const cursorOf = (key: Record<string, unknown>) => Buffer.from(JSON.stringify(key)).toString('base64url');
  const page = (request: RequestOf<typeof listStepEntries>) => world.client.request(listStepEntries, request, { timeoutMs: 30_000 });
  const keyOf = (e: StepEntryView) => `${e.workflowId}/${e.stepId}/${e.entrySeq}`;

  /** Every entry of the task, page by page; and how many pages that took. */
  async function all(request: RequestOf<typeof listStepEntries>): Promise<{ entries: StepEntryView[]; pages: number }> {
    let pages = 0;
    const entries = await readAllPages(
      (cursor) => {
        pages++;
        return page({ ...request, ...(cursor ? { cursor } : {}) });
      },
      (p) => p.entries,
    );
    return { entries, pages };
  }

  /**
   * A task moved between steps a and b, `moves` times: each move admits it, an entry of the step it
   * lands on. A move made while the dispatch of the step's last entry still writes its markers to the
   * (task, step) stream contends with it; on a loaded machine a hundred markers can outlast the move's
   * own retries, and it is answered VERSION_CONFLICT, nothing done — sent again, as a caller would.
   */
  async function flipped(workflowId: string, moves: number): Promise<string> {
    const { taskId } = await world.task(workflowId, { stepId: 'a' });
    for (let i = 0; i < moves; i++) {
      const move = { taskId, toStepId: i % 2 === 0 ? 'b' : 'a', idempotencyKey: world.key('move') };
      await eventually(
        () => world.move(move.taskId, move.toStepId, move.idempotencyKey).then(
          () => true,
          (error: unknown) => {
            if ((error as { code?: string }).code === ErrorCode.VERSION_CONFLICT) return false;
            throw error;
          },
        ),
        { what: `move ${i + 1} of ${taskId}` },
      );
    }
    return taskId;
  }

  beforeAll(async () => {
    await world.start();
    await world.importYaml('flip', `
name: Flip
steps:
  - { id: a, name: A, on_enter: [{ type: clear_decisions }] }
  - { id: b, name: B, on_enter: [{ type: clear_decisions }] }
`);
    // 100 positions (the most a step declares) of a type the engine does not know, named as long as a type
    // may be: each a marker (skipped, unrecognised) of every entry, which so is some 16 KB as JSON or more.
    const many = Array.from({ length: 100 }, (_, i) => `      - type: not_known_${String(i).padStart(3, '0')}_${'q'.repeat(49)}`).join('\n');
    await world.importYaml('bulky', `
name: Bulky
steps:
  - id: a
    name: A
    on_enter:
${many}
  - id: b
    name: B
    on_enter:
${many}
`);
  }, 120_000);
  afterAll(() => world.close(), 60_000);

  it('answers a request without a cursor with the first page, and reads on to every entry exactly once, in order', async () => {
    const taskId = await flipped('flip', 8);
    const old = await page({ taskId } as RequestOf<typeof listStepEntries>);
    expect(old.entries.map(keyOf)).toEqual(['flip/a/1', 'flip/a/2', 'flip/a/3', 'flip/a/4', 'flip/b/1', 'flip/b/2', 'flip/b/3', 'flip/b/4']);
    expect(old.nextCursor).toBeNull();

    const { entries, pages } = await all({ taskId, limit: 3 });
    expect(pages).toBe(3);
    expect(entries.map(keyOf)).toEqual(old.entries.map(keyOf));
    const onlyB = await all({ taskId, stepId: 'b', limit: 3 });
    expect(onlyB.entries.map(keyOf)).toEqual(['flip/b/1', 'flip/b/2', 'flip/b/3', 'flip/b/4']);
    expect(onlyB.pages).toBe(2);
  });

  it('neither skips nor repeats an entry that existed when paging began, while the task enters steps meanwhile', async () => {
    const taskId = await flipped('flip', 8);
    const existing = (await all({ taskId, limit: 100 })).entries.map(keyOf);
    const seen: string[] = [];
    let current = await page({ taskId, limit: 3 });
    seen.push(...current.entries.map(keyOf));
    // the task is at a: it enters b (b/5, after the cursor) and a again (a/5, after it too)
    await world.move(taskId, 'b');
    await world.move(taskId, 'a');
    current = await page({ taskId, limit: 3, cursor: current.nextCursor! });
    seen.push(...current.entries.map(keyOf));
    // the cursor is at b now: a/6 lands before it
    await world.move(taskId, 'b');
    await world.move(taskId, 'a');
    while (current.nextCursor) {
      current = await page({ taskId, limit: 3, cursor: current.nextCursor });
      seen.push(...current.entries.map(keyOf));
    }
    expect(new Set(seen).size).toBe(seen.length);
    for (const key of existing) expect(seen.filter((k) => k === key)).toEqual([key]);
  });

  it('ends a page at 512 KiB of entries, however many the limit allows', async () => {
    // 40 entries: more than 512 KiB of them
    const taskId = await flipped('bulky', 40);
    const first = await page({ taskId, limit: 500 });
    expect(first.entries.length).toBeGreaterThan(0);
    expect(first.entries.length).toBeLessThan(40);
    expect(Buffer.byteLength(JSON.stringify(first.entries))).toBeLessThanOrEqual(512 * 1024);
    expect(first.nextCursor).toEqual(expect.any(String));
    const { entries, pages } = await all({ taskId, limit: 500 });
    expect(pages).toBeGreaterThan(1);
    expect(entries.map(keyOf)).toEqual([...Array.from({ length: 20 }, (_, i) => `bulky/a/${i + 1}`), ...Array.from({ length: 20 }, (_, i) => `bulky/b/${i + 1}`)]);
    expect(entries.every((e) => e.markers.length === 100)).toBe(true);
  }, 180_000);

  it('refuses a cursor it did not hand out with INVALID_COMMAND', async () => {
    const taskId = await flipped('flip', 2);
    const foreign = [
      'not a cursor',
      cursorOf({ after: '5' }), // a list_jobs cursor
      cursorOf({ q: 'list_worktrees', key: 'shop-main-1a2b3c4d5e6f' }),
      cursorOf({ q: 'list_step_entries', workflowId: 'flip', stepId: 'B', entrySeq: 1 }),
      cursorOf({ q: 'list_step_entries', workflowId: 'flip', stepId: 'b', entrySeq: 2 ** 40 }),
      cursorOf({ q: 'list_step_entries', workflowId: 'flip', stepId: 'b', entrySeq: '1' }),
    ];
    for (const cursor of foreign) {
      await expect(page({ taskId, limit: 10, cursor })).rejects.toMatchObject({ code: ErrorCode.INVALID_COMMAND, issues: [{ path: ['cursor'] }] });
    }
  });
});
