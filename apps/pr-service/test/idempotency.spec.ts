import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { ErrorCode, markPrReadyForReview, type RequestOf } from '@gantry/contracts';
import { octokitFor } from '@gantry/github-fake/testing';
import { Bus, CommandClient } from '@gantry/messaging';
import { eventually, testDatabaseUrl, testNatsUrl } from '@gantry/testing';
import { inProcessPrService, pushedBranch } from './in-process-world.js';

/*
 * The idempotency rules of mark_pr_ready_for_review (docs/pr-service.md, "Commands"), sent over NATS to
 * the pr-service against the local GitHub: a repeat answers as the first time, records nothing more and
 * marks the PR ready on GitHub no second time; the key with another request is IDEMPOTENCY_CONFLICT and
 * changes nothing; two first attempts at once are one; the same key in two products' scopes is two actions.
 */
describe('idempotency of mark_pr_ready_for_review', () => {
  const world = inProcessPrService('pr_idem');
  let bus: Bus;
  let client: CommandClient;
  let db: pg.Pool;

  beforeAll(async () => {
    bus = await Bus.connect({ servers: testNatsUrl, naming: world.service.naming, name: 'pr-idem-test' });
    client = new CommandClient(bus);
    db = new pg.Pool({ connectionString: testDatabaseUrl, options: `-c search_path=${world.service.schema}`, max: 2 });
  }, 30_000);
  afterAll(async () => {
    await bus?.close();
    await db?.end();
  });

  const keyOf = (product: string, rest = randomUUID()) => `${product}/pr-ready:${rest}`;
  const sprintRun = () => `sprintrun-${randomUUID()}`;
  const readyMarks = async () => (await world.fake.control.requests({ method: 'POST', graphqlField: 'markPullRequestReadyForReview' })).length;

  /** A product's repository with a sprint branch pushed and its draft PR opened and tracked: what a sprint run DONE makes ready. */
  async function draftSprintPullRequest(label: string) {
    const name = `${label}-${randomUUID().slice(0, 6)}`;
    const product = `product-${name}`;
    const branch = `sprint/SP-${randomUUID().slice(0, 6)}`;
    const repo = await world.fake.control.createRepository({ owner: 'acme', name, initialFiles: { 'README.md': '# shop\n' } });
    const head = pushedBranch(repo.cloneUrl, branch, { 'src/sprint.ts': 'export const sprint = 1;\n' }, 'sprint work');
    const { data: pr } = await octokitFor(world.fake).octokit.rest.pulls.create({ owner: 'acme', repo: name, head: branch, base: 'main', title: `Sprint ${branch}`, draft: true });
    await world.addProduct(product, repo.fullName, repo.cloneUrl);
    const { pullRequestId } = await world.adoptedSprintPullRequest(product, repo.fullName, branch, head, pr);
    // The reconciler's first read of the adopted PR, and what it records of it, come before the command.
    const prPath = `/repos/${repo.fullName}/pulls/${pr.number}`;
    await eventually(async () => (await world.fake.control.requests({ method: 'GET', path: prPath })).some((r) => r.path === prPath), { what: 'the adopted PR read' });
    return { product, repository: repo.fullName, branch, pullRequestId, prNumber: pr.number };
  }

  /** Every run the reconciler was asked for has ended, and GitHub shows the PRs marked ready that were: what a command set going is done. */
  const written = async (readyOnGitHub: { repository: string; prNumber: number }[] = []) => {
    for (const pr of readyOnGitHub) {
      const [owner, repo] = pr.repository.split('/') as [string, string];
      await eventually(async () => !(await octokitFor(world.fake).octokit.rest.pulls.get({ owner, repo, pull_number: pr.prNumber })).data.draft, { what: `PR ${pr.prNumber} ready on GitHub` });
    }
    const runs = (world.reconciler as unknown as { runs: { active: number } }).runs;
    await eventually(() => runs.active === 0, { what: 'no reconciler run under way' });
    return { events: (await db.query(`SELECT count(*)::int AS n FROM events`)).rows[0].n as number, readyMarks: await readyMarks() };
  };
  const since = (before: { events: number; readyMarks: number }, after: { events: number; readyMarks: number }) => ({
    events: after.events - before.events,
    readyMarks: after.readyMarks - before.readyMarks,
  });
  const markReady = (request: RequestOf<typeof markPrReadyForReview>) => client.request(markPrReadyForReview, request);

  it('the same key with the same request gets the stored answer and records nothing more, nor marks the PR ready again', async () => {
    const pr = await draftSprintPullRequest('repeat');
    const request = { repository: pr.repository, branch: pr.branch, sprintRunId: sprintRun(), idempotencyKey: keyOf(pr.product) };
    const first = await markReady(request);
    const before = await written([pr]);
    expect(before.readyMarks).toBe(1);
    expect(await markReady(request)).toEqual(first);
    expect(since(before, await written())).toEqual({ events: 0, readyMarks: 0 });
  }, 120_000);

  it('the same key with another request is IDEMPOTENCY_CONFLICT and changes nothing', async () => {
    const pr = await draftSprintPullRequest('conflict');
    const other = await draftSprintPullRequest('conflict');
    const request = { repository: pr.repository, branch: pr.branch, sprintRunId: sprintRun(), idempotencyKey: keyOf(pr.product) };
    const first = await markReady(request);
    const before = await written([pr]);
    const outcomes: Record<string, unknown> = {};
    const others = { 'another sprint run': { ...request, sprintRunId: sprintRun() }, 'another branch': { ...request, repository: other.repository, branch: other.branch } };
    for (const [what, changed] of Object.entries(others)) outcomes[what] = await markReady(changed).then((reply) => ({ answered: reply }), (error: unknown) => (error as { code?: string }).code);
    expect(outcomes).toEqual({ 'another sprint run': ErrorCode.IDEMPOTENCY_CONFLICT, 'another branch': ErrorCode.IDEMPOTENCY_CONFLICT });
    expect(since(before, await written())).toEqual({ events: 0, readyMarks: 0 });
    expect(await markReady(request)).toEqual(first);
  }, 120_000);

  it('two first attempts at once have one effect, and both callers get the same answer', async () => {
    const alone = await draftSprintPullRequest('once');
    let before = await written();
    await markReady({ repository: alone.repository, branch: alone.branch, sprintRunId: sprintRun(), idempotencyKey: keyOf(alone.product) });
    const once = since(before, await written([alone]));
    expect(once).toMatchObject({ readyMarks: 1 });

    const pr = await draftSprintPullRequest('once');
    const request = { repository: pr.repository, branch: pr.branch, sprintRunId: sprintRun(), idempotencyKey: keyOf(pr.product) };
    before = await written();
    const [a, b] = await Promise.all([markReady(request), markReady(request)]);
    expect(b).toEqual(a);
    expect(since(before, await written([pr]))).toEqual(once);
  }, 120_000);

  it('the same key in two products\' scopes names two actions: neither is refused, each has its effect', async () => {
    const rest = randomUUID();
    const sprintRunId = sprintRun();
    const effects = [];
    for (const label of ['one', 'two']) {
      const pr = await draftSprintPullRequest(label);
      const before = await written();
      await markReady({ repository: pr.repository, branch: pr.branch, sprintRunId, idempotencyKey: keyOf(pr.product, rest) });
      effects.push(since(before, await written([pr])));
    }
    expect(effects[0]).toMatchObject({ readyMarks: 1 });
    expect(effects[1]).toEqual(effects[0]);
  }, 120_000);
});
