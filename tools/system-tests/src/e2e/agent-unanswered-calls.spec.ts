import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { eventually } from '@gantry/testing';
import { E2eSystem } from './e2e-system.js';

/*
 * An agent that does not wait for the answers to its tool calls (docs/jobs.md, "Commands under a
 * claim"): its calls are still being recorded by the job service when it exits. What the runner
 * does after the agent — push or not, finish with what — must rest on those calls' outcome, as the
 * job service will judge the finish by them.
 */

async function lines(record: string): Promise<Record<string, unknown>[]> {
  return (await readFile(record, 'utf8').catch(() => ''))
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l));
}

describe('an agent that leaves its tool calls unanswered', () => {
  const system = new E2eSystem();

  beforeAll(() => system.start(), 60_000);
  afterAll(() => system.stop(), 60_000);

  it('story-log calls still on their way when the agent exits are waited for: the job is DONE with its branch pushed, never DONE unpushed', async () => {
    await system.startRunner('runner-u');
    const gate = join(system.root, 'gate-unanswered');
    const record = system.recordFile('unanswered');
    const branch = 'feat/unanswered-1';
    const jobId = await system.enqueue({
      branch,
      maxAttempts: 1,
      payload: { standIn: { behaviour: 'commit', leaveUnanswered: true, waitForFile: gate, recordArgvTo: record, files: { 'src/unanswered.ts': 'unanswered\n' } } },
    });
    await eventually(async () => (await system.agentStarts(record)).length === 1, { what: 'the agent started', timeoutMs: 30_000 });
    const jobService = system.jobService.process;
    // The job service answers nothing for a while (a pause, a slow database): the agent's calls wait.
    jobService.kill('SIGSTOP');
    try {
      await writeFile(gate, '');
      await eventually(async () => (await lines(record)).some((l) => 'exit' in l), { what: 'the agent exited', timeoutMs: 30_000 });
      // Time for the runner to verify and decide what to report, well within the claim's lease.
      await new Promise((resolve) => setTimeout(resolve, 2500));
    } finally {
      jobService.kill('SIGCONT');
    }
    const job = await system.terminal(jobId, 60_000);
    expect({ status: job.status, error: job.error, storyLog: job.storyLog }).toEqual({
      status: 'DONE',
      error: null,
      storyLog: { implementationEntries: 1, commitEntries: 1, testResultEntries: 1 },
    });
    expect(job.pushedAt).not.toBeNull();
    expect(job.headSha).toBe(await system.origin.sha(branch));
    await system.stopRunner('runner-u');
  }, 120_000);
});
