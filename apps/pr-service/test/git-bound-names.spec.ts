import { randomUUID } from 'node:crypto';
import { ErrorCode, getPullRequest, markPrReadyForReview } from '@gantry/contracts';
import { EventStore } from '@gantry/eventstore';
import { Bus, CommandClient } from '@gantry/messaging';
import { testNatsUrl } from '@gantry/testing';
import { inProcessPrService } from './in-process-world.js';

/*
 * A branch git would refuse (docs/git.md, "Branch names") is refused at the pull-request service's door
 * INVALID_COMMAND, with an issue at `branch`, and nothing is recorded: a sprint branch that git could
 * never push would otherwise start a pull request's books that no push, open or merge could ever serve.
 */
describe('branch names at the pull-request commands', () => {
  const world = inProcessPrService('pr_refs');
  let bus: Bus;

  beforeAll(async () => {
    bus = await Bus.connect({ servers: testNatsUrl, naming: world.service.naming, name: 'pr-refs-test' });
  }, 30_000);
  afterAll(() => bus?.close());

  it('mark_pr_ready_for_review and get_pull_request refuse a branch git would refuse INVALID_COMMAND at branch, and record nothing', async () => {
    const client = new CommandClient(bus);
    const events = async () => (await world.service.app.get(EventStore).pool.query(`SELECT count(*)::int AS n FROM events`)).rows[0].n as number;
    const before = await events();
    const refused = { code: ErrorCode.INVALID_COMMAND, issues: [expect.objectContaining({ path: ['branch'] })] };
    for (const branch of ['sprint/SP-1.lock', 'sprint/.SP-1', 'sprint/', 'sprint//SP-1', 'sprint/SP-1.', 'sprint@{1}', 'HEAD', '@', 'sprint\u0000SP-1', 'sprint\u0001SP-1', 'sprint\u007fSP-1']) {
      const ready = { repository: 'acme/shop', branch, sprintRunId: `sprintrun-${randomUUID()}`, idempotencyKey: `product-refs/pr-ready:${randomUUID()}` };
      await expect(client.request(markPrReadyForReview, ready)).rejects.toMatchObject(refused);
      await expect(client.request(getPullRequest, { repository: 'acme/shop', branch })).rejects.toMatchObject(refused);
    }
    expect(await events()).toBe(before);
  }, 120_000);
});
