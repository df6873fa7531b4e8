import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { E2eSystem } from './e2e-system.js';

/**
 * An agent that crashes prints whatever it had: credentials in URLs, Authorization headers, tokens,
 * its own API key. The rollback's reason carries the end of its stderr into the job's events; none
 * of those secrets may get there (docs/configuration.md, "Secrets in events").
 */
describe('secrets in what an agent prints do not reach the events', () => {
  const system = new E2eSystem();
  // The runner's own environment: values only it knows are secret.
  const agentKey = 'agent-key-value-7f3c9a1e5b2d';
  const githubToken = 'runner-github-token-0c8e4b7a';
  const secrets = {
    urlPassword: 'hunter2-url-password',
    bearer: 'bearerTokenValue0123456789',
    githubPat: 'ghp_0123456789abcdefghijABCDEFGHIJ012345',
    assigned: 'assignedSecretValue42',
    agentKey,
    githubToken,
  };

  beforeAll(async () => {
    await system.start();
    await system.startRunner('runner-secrets', { kinds: ['PLAN_CHAT'], env: { ANTHROPIC_API_KEY: agentKey, GANTRY_GITHUB_TOKEN: githubToken } });
  }, 90_000);
  afterAll(() => system.stop(), 60_000);

  it("a crashed agent's stderr in JobClaimRolledBack.reason is scrubbed; the job's events and view hold none of the secrets", async () => {
    const stderrFile = join(system.records, 'crash-stderr.txt');
    await writeFile(
      stderrFile,
      [
        `fatal: unable to access 'https://deploy:${secrets.urlPassword}@git.example.com/acme/app.git/'`,
        `> Authorization: Bearer ${secrets.bearer}`,
        `pushing with ${secrets.githubPat}`,
        `GANTRY_SECRET=${secrets.assigned}`,
        `the key in use is ${secrets.agentKey} (from the environment)`,
        `and the runner's ${secrets.githubToken} too`,
        '',
      ].join('\n'),
    );
    const jobId = await system.enqueue({ kind: 'PLAN_CHAT', maxAttempts: 1, payload: { standIn: { behaviour: 'exit_nonzero', exitCode: 2, stderrFile } } });
    const job = await system.terminal(jobId);
    expect(job.status).toBe('FAILED');

    const rolledBack = (await system.events(jobId)).find((e) => e.type === 'JobClaimRolledBack')!.data;
    const reason = String(rolledBack.reason);
    // The reason is still useful: what happened, and where the secrets were.
    expect(reason).toMatch(/^agent exited with code 2 without finishing the job: /);
    expect(reason).toContain('https://deploy:***@git.example.com');
    expect(reason).toContain('Bearer ***');
    expect(reason).toContain('the key in use is *** (from the environment)');
    const everything = `${await system.allEventsText('jobs')}\n${JSON.stringify(job)}`;
    for (const [what, secret] of Object.entries(secrets)) expect({ what, leaked: everything.includes(secret) }).toEqual({ what, leaked: false });
    // Nor the runner's own log, which says why it rolled the claim back.
    const log = system.runners.get('runner-secrets')!.output();
    expect(log).toContain('claim rolled back');
    for (const [what, secret] of Object.entries(secrets)) expect({ what, inRunnerLog: log.includes(secret) }).toEqual({ what, inRunnerLog: false });
  }, 90_000);
});
