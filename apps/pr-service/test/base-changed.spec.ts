import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { getPullRequest } from '@gantry/contracts';
import { EventStore } from '@gantry/eventstore';
import { octokitFor, Clone } from '@gantry/github-fake/testing';
import { Bus, CommandClient } from '@gantry/messaging';
import { eventually, testDatabaseUrl, testNatsUrl } from '@gantry/testing';
import { inProcessPrService } from './in-process-world.js';

/*
 * A person points an open PR at another base on GitHub after the pr-service recorded it. GitHub sends
 * `pull_request.edited` with `changes.base`, and a read of the PR shows the new `base.ref`. Whichever sees it first — the
 * webhook's read or the resync's — records the change once (`PullRequestBaseChanged`), a repeat of either records
 * nothing, get_pull_request answers the current base, and the merge goes into it.
 */
describe('a pull request whose base a person changes on GitHub', () => {
  const owner = 'acme';
  const name = 'retarget';
  const branch = 'story/ST-retarget';
  const world = inProcessPrService('pr_base_changed');
  const clones: Clone[] = [];
  let bus: Bus;
  let client: CommandClient;
  let db: pg.Pool;
  afterAll(async () => {
    clones.forEach((clone) => clone.remove());
    await bus?.close();
    await db?.end();
  });

  it('records each change once (webhook, resync, duplicate delivery), answers the current base, and merges into it', async () => {
    bus = await Bus.connect({ servers: testNatsUrl, naming: world.service.naming, name: 'pr-base-changed-test' });
    client = new CommandClient(bus);
    db = new pg.Pool({ connectionString: testDatabaseUrl, options: `-c search_path=${world.service.schema}`, max: 1 });
    const repo = await world.fake.control.createRepository({ owner, name, initialFiles: { 'README.md': '# shop\n' }, requiredChecks: ['ci/test'] });
    const clone = new Clone(repo.cloneUrl);
    clones.push(clone);
    const main = clone.git('rev-parse', 'origin/main');
    clone.git('push', '-q', 'origin', 'origin/main:refs/heads/develop');
    clone.git('push', '-q', 'origin', 'origin/main:refs/heads/release');
    const head = clone.commitAndPush(branch, { 'src/one.ts': 'export const one = 1;\n' }, 'first task');
    await world.fake.control.refresh();
    await world.fake.control.setWebhooks([{ url: `${world.service.url}/webhooks/github`, secret: 'unused' }]);

    await world.addProduct(`product-${name}`, repo.fullName, repo.cloneUrl);
    const { pullRequestId, record } = world.pullRequest(repo.fullName, branch);
    const jobs = [`job-${randomUUID()}`, `job-${randomUUID()}`];
    const flow = { productId: `product-${name}`, baseBranch: 'main', strategy: 'STORY', mergeMethod: 'SQUASH', requiredChecks: ['ci/test'], title: `Story ST-${name}` };
    await record('RecordBranchPushed', { headSha: head, pushedAt: world.log.now(), position: null, jobId: null, sprintRunId: null, flow });
    await record('RecordTaskQueued', { jobId: jobs[0], taskId: 'task-1', storyId: 'story-1', storyTaskIds: ['task-1', 'task-2'] });
    world.reconciler.ask(pullRequestId);
    const number = await eventually(async () => (await world.log.load(pullRequestId)).pr?.number, { what: 'the PR opened', timeoutMs: 60_000 });

    const view = () => client.request(getPullRequest, { repository: repo.fullName, branch });
    const baseChanges = async () =>
      (await world.service.app.get(EventStore).readStream(pullRequestId)).filter((e) => e.type === 'PullRequestBaseChanged').map((e) => e.data as Record<string, unknown>);
    const processed = async (deliveryId: string, times: number) =>
      eventually(async () => {
        const { rows } = await db.query(`SELECT processed_at, outcome FROM webhook_deliveries WHERE delivery_id = $1`, [deliveryId]);
        const sent = (await world.fake.control.deliveries({ event: 'pull_request', action: 'edited' })).find((d) => d.id === deliveryId);
        seen = { row: rows[0], attempts: sent?.attempts };
        return rows[0]?.processed_at && (sent?.attempts.length ?? 0) >= times ? rows[0] : null;
      }, { what: `delivery ${deliveryId} processed`, timeoutMs: 30_000 }).catch((error: unknown) => {
        throw new Error(`${String(error)}: ${JSON.stringify(seen)}`);
      });
    let seen: unknown = null;
    /** A read of the PR answered after `since`, and time for what it showed to be recorded. */
    const readSince = async (since: string) => {
      await eventually(
        async () => (await world.fake.control.requests({ method: 'GET', path: `/pulls/${number}` })).some((r) => r.at > since && r.path.endsWith(`/pulls/${number}`)),
        { what: 'a read of the PR', timeoutMs: 30_000 },
      );
      await new Promise((resolve) => setTimeout(resolve, 1500));
    };
    expect(await view()).toMatchObject({ prNumber: number, baseBranch: 'main' });
    const { octokit } = octokitFor(world.fake);

    // The webhook path, its delivery sent twice: the read it asks for records the change, and nothing records it again.
    await world.fake.control.onNextDeliveries({ event: 'pull_request', action: 'edited', count: 1, effect: 'duplicate' });
    await octokit.rest.pulls.update({ owner, repo: name, pull_number: number, base: 'develop' });
    const edited = await world.fake.control.waitForDelivery((d) => d.event === 'pull_request' && d.action === 'edited' && d.payload.changes?.base?.ref?.from === 'main', { timeoutMs: 10_000 });
    expect(edited.payload).toMatchObject({ changes: { base: { ref: { from: 'main' }, sha: { from: main } } }, pull_request: { number, base: { ref: 'develop' } } });
    await processed(edited.id, 2);
    await eventually(async () => (await baseChanges()).length > 0, { what: 'the base change recorded from the webhook', timeoutMs: 30_000 });
    const resynced = new Date().toISOString();
    world.reconciler.ask(pullRequestId);
    await readSince(resynced);
    expect(await baseChanges()).toEqual([expect.objectContaining({ prNumber: number, previousBaseBranch: 'main', baseBranch: 'develop', headSha: head })]);
    expect(await view()).toMatchObject({ baseBranch: 'develop' });

    // The resync path, the webhook dropped: the resync's read records the change; the delivery sent later records nothing more.
    await world.fake.control.onNextDeliveries({ event: 'pull_request', action: 'edited', count: 1, effect: 'drop' });
    await octokit.rest.pulls.update({ owner, repo: name, pull_number: number, base: 'release' });
    const dropped = await world.fake.control.waitForDelivery((d) => d.action === 'edited' && d.payload.changes?.base?.ref?.from === 'develop' && d.state === 'dropped', { timeoutMs: 10_000 });
    world.reconciler.ask(pullRequestId);
    await eventually(async () => (await baseChanges()).length === 2, { what: 'the base change recorded from the resync', timeoutMs: 30_000 });
    const redelivered = new Date().toISOString();
    await world.fake.control.redeliver(dropped.id);
    await processed(dropped.id, 1);
    await readSince(redelivered);
    expect((await baseChanges()).map((d) => [d.previousBaseBranch, d.baseBranch])).toEqual([['main', 'develop'], ['develop', 'release']]);
    expect(await view()).toMatchObject({ baseBranch: 'release' });

    // The scope done and the head green: the merge goes into the base the PR is on now.
    await record('RecordTaskDone', { jobId: jobs[0], taskId: 'task-1' });
    await record('RecordTaskQueued', { jobId: jobs[1], taskId: 'task-2', storyId: 'story-1', storyTaskIds: ['task-1', 'task-2'] });
    await record('RecordTaskDone', { jobId: jobs[1], taskId: 'task-2' });
    await world.fake.control.setCheck(repo.fullName, { sha: head, name: 'ci/test', status: 'completed', conclusion: 'success' });
    world.reconciler.ask(pullRequestId);
    await eventually(async () => (await view()).phase === 'merged', { what: 'the PR merged', timeoutMs: 60_000 });
    expect(await view()).toMatchObject({ baseBranch: 'release', phase: 'merged' });
    clone.git('fetch', '-q', 'origin');
    expect(clone.git('show', 'origin/release:src/one.ts')).toBe('export const one = 1;');
    expect(clone.git('rev-parse', 'origin/main')).toBe(main);
    expect(clone.git('rev-parse', 'origin/develop')).toBe(main);
    expect(await baseChanges()).toHaveLength(2);
  }, 240_000);

  it('a conflict with the previous base is over; the new base\'s conflict is recorded from the same read, with its own files', async () => {
    const other = 'conflicts';
    const otherBranch = 'story/ST-conflicts';
    const repo = await world.fake.control.createRepository({ owner, name: other, initialFiles: { 'app.txt': 'one\n' }, requiredChecks: ['ci/test'] });
    await world.fake.control.commit(repo.fullName, { branch: 'develop', from: 'main', files: { 'other.txt': 'develop\n' }, message: 'develop adds other.txt' });
    await world.fake.control.commit(repo.fullName, { branch: 'release', from: 'main', files: { 'notes.txt': 'release\n' }, message: 'release' });
    const clone = new Clone(repo.cloneUrl);
    clones.push(clone);
    const head = clone.commitAndPush(otherBranch, { 'app.txt': 'head\n', 'other.txt': 'head\n' }, 'first task');
    await world.fake.control.commit(repo.fullName, { branch: 'main', files: { 'app.txt': 'main\n' }, message: 'main changes app.txt' });
    await world.fake.control.refresh();

    await world.addProduct(`product-${other}`, repo.fullName, repo.cloneUrl);
    const { pullRequestId, record } = world.pullRequest(repo.fullName, otherBranch);
    const flow = { productId: `product-${other}`, baseBranch: 'main', strategy: 'STORY', mergeMethod: 'SQUASH', requiredChecks: ['ci/test'], title: `Story ST-${other}` };
    await record('RecordBranchPushed', { headSha: head, pushedAt: world.log.now(), position: null, jobId: null, sprintRunId: null, flow });
    world.reconciler.ask(pullRequestId);
    const conflictOf = async () => (await world.log.load(pullRequestId)).conflict;
    await eventually(async () => (await conflictOf())?.files.join(), { what: 'the conflict with main', timeoutMs: 60_000 });
    expect((await conflictOf())?.files).toEqual(['app.txt']);
    const number = (await world.log.load(pullRequestId)).pr!.number;

    // GitHub has worked out the mergeability against the new base before the read that first shows it (its webhook lost).
    await world.fake.control.setMergeabilityMode('manual');
    await world.fake.control.onNextDeliveries({ event: 'pull_request', action: 'edited', count: 1, effect: 'drop' });
    const { octokit } = octokitFor(world.fake);
    await octokit.rest.pulls.update({ owner, repo: other, pull_number: number, base: 'develop' });
    await world.fake.control.computeMergeability();
    await world.fake.control.setMergeabilityMode('auto');
    world.reconciler.ask(pullRequestId);
    const events = async () => (await world.service.app.get(EventStore).readStream(pullRequestId)).map((e) => ({ type: e.type, data: e.data as Record<string, unknown> }));
    await eventually(async () => (await events()).some((e) => e.type === 'PullRequestMergeConflict' && e.data.baseBranch === 'develop'), { what: 'the conflict with develop', timeoutMs: 30_000 });
    const seen = await events();
    const changed = seen.findIndex((e) => e.type === 'PullRequestBaseChanged');
    expect(seen[changed + 1]).toMatchObject({ type: 'PullRequestMergeConflict', data: { baseBranch: 'develop', headSha: head, conflictingFiles: ['other.txt'] } });
    expect((await conflictOf())?.files).toEqual(['other.txt']);

    // On a base it merges cleanly with, the PR conflicts no more.
    await octokit.rest.pulls.update({ owner, repo: other, pull_number: number, base: 'release' });
    await eventually(async () => (await world.log.load(pullRequestId)).pr?.baseBranch === 'release', { what: 'the base release recorded', timeoutMs: 30_000 });
    expect(await conflictOf()).toBeNull();
    const view = await client.request(getPullRequest, { repository: repo.fullName, branch: otherBranch });
    expect(view).toMatchObject({ baseBranch: 'release', conflict: null });
    expect(view.phase).not.toBe('merge_conflict_paused');
  }, 240_000);
});
