import { vulnerabilityCheck } from '@simple-git/argv-parser';
import { gitEnvironment } from './environment.js';
import { commandLineOverrides, CREDENTIAL_HELPER_VARIABLE } from './overrides.js';
import { POLICY_OPT_INS, unsafeOperations } from './unsafe-operations.js';

describe('the policy beside simple-git’s guard', () => {
  it('opts in to exactly the categories its own overrides and environment fall in, no more', () => {
    const saved = process.env[CREDENTIAL_HELPER_VARIABLE];
    process.env[CREDENTIAL_HELPER_VARIABLE] = 'store --file=/etc/gantry/git-credentials';
    try {
      const policyArgs = [...commandLineOverrides().flatMap((setting) => ['-c', setting]), 'status'];
      const environment = gitEnvironment({ name: 'Gantry', email: 'gantry@example.invalid' });
      const found = new Set(vulnerabilityCheck(policyArgs, environment).map((v) => v.category));
      expect([...found].sort()).toEqual(Object.keys(POLICY_OPT_INS).sort());
    } finally {
      if (saved === undefined) delete process.env[CREDENTIAL_HELPER_VARIABLE];
      else process.env[CREDENTIAL_HELPER_VARIABLE] = saved;
    }
  });

  it('finds nothing in the commands the services run, and the categories of a hostile one', () => {
    for (const args of [
      ['fetch', '--quiet', '--prune', '--no-write-fetch-head', '--refmap=', '--', 'https://example.com/r.git', '+refs/heads/*:refs/remotes/origin/*'],
      ['push', '--porcelain', '--', 'https://example.com/r.git', `${'a'.repeat(40)}:refs/heads/feature/x`],
      ['config', '--list', '-z', '--show-scope', '--show-origin'],
      ['remote', 'set-url', 'origin', '--', 'https://example.com/r.git'],
    ]) {
      expect(unsafeOperations(args)).toEqual([]);
    }
    expect(unsafeOperations(['push', '--receive-pack=/tmp/agent', '--', 'https://example.com/r.git'])).toEqual(['allowUnsafePack']);
    expect(unsafeOperations(['config', '--file', '/tmp/c', '--unset-all', 'filter.agent.clean'])).toEqual(['allowUnsafeFilter']);
  });
});
