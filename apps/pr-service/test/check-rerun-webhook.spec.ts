import { eventually } from '@gantry/testing';
import { inProcessPrService } from './in-process-world.js';

/*
 * PR-4, PR-12: a check re-run on a head seen green shows the check pending, and the head is not green while it runs.
 * GitHub tells of the re-run with a `check_run` webhook (`created` for the new run); the PR is read at once, so a merge
 * is not decided on the old green in the minute before the resync. The resync is off here (an hour): only the webhook
 * has the PR read. The pr-service runs in this process against the local GitHub, on the real PostgreSQL and NATS.
 */
describe('a check re-run after the checks were green', () => {
  const world = inProcessPrService('pr_check_rerun');

  it('its check_run created webhook has the PR read: the check is pending, the head no longer green', async () => {
    const { repository, h2, pullRequestId } = await world.storyPushedTwice('check-rerun', 'job-00000000-0000-4000-8000-0000000000e1', ['T-1', 'T-2']);
    await world.fake.control.setCheck(repository, { sha: h2, name: 'ci/test', status: 'completed', conclusion: 'success' });
    world.reconciler.ask(pullRequestId);
    await eventually(async () => (await world.log.load(pullRequestId)).checks?.verdict === 'GREEN', { what: 'H2\'s green checks recorded', timeoutMs: 60_000 });
    // GitHub delivers webhooks from now on, and nothing else has the PR read: the re-run's deliveries alone.
    await new Promise((resolve) => setTimeout(resolve, 1000));
    await world.fake.control.setWebhooks([{ url: `${world.service.url}/webhooks/github`, secret: 'unused' }]);

    // CI runs ci/test again on H2: a new run, queued.
    await world.fake.control.setCheck(repository, { sha: h2, name: 'ci/test', status: 'queued' });
    const created = await world.fake.control.waitForDelivery((d) => d.event === 'check_run' && d.action === 'created');
    expect(created.payload.check_run).toMatchObject({ head_sha: h2, name: 'ci/test', status: 'queued' });
    await eventually(async () => (await world.log.load(pullRequestId)).checks === null, { what: 'H2\'s check pending again', timeoutMs: 30_000 });
    expect(await world.log.load(pullRequestId)).toMatchObject({ headSha: h2, mergeDecision: null });
  }, 180_000);
});
