import { MASK, scrubSecrets, scrubStrings, secretScrubber, secretValuesIn } from './secrets.js';

describe('the secret scrubber', () => {
  it.each([
    ['fatal: could not read from https://deploy:hunter2pass@git.example.com/x.git', 'https://deploy:***@git.example.com/x.git', 'hunter2pass'],
    ['remote: https://ghp_abcdefghijklmnopqrstuvwxyz0123@github.com/o/r', 'https://***@github.com/o/r', 'ghp_abcdef'],
    ['nats://gantry:natspassword1@nats:4222', 'nats://gantry:***@nats:4222', 'natspassword1'],
    ['> Authorization: Bearer abcdefghijklmnop1234', 'Authorization: Bearer ***', 'abcdefghijklmnop1234'],
    ['{"Authorization":"token 0123456789abcdef"}', '"Authorization":"token ***', '0123456789abcdef'],
    ['curl -H "authorization: Basic dXNlcjpwYXNz"', 'authorization: Basic ***', 'dXNlcjpwYXNz'],
    ['used GITHUB_TOKEN=abcd1234efgh5678 for the push', 'GITHUB_TOKEN=***', 'abcd1234efgh5678'],
    ['password: correct-horse-battery', 'password: ***', 'correct-horse-battery'],
    ['key ghp_0123456789abcdefghijklmnopqrstuvwxyz leaked', `key ${MASK} leaked`, 'ghp_0123'],
    ['github_pat_11ABCDEFG0123456789_abcdefghijklmnop', MASK, 'github_pat_11'],
    ['x-api-key: sk-ant-api03-abcdefghijklmnop_qrstu', MASK, 'sk-ant-api03'],
    ['jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N', `jwt ${MASK}`, 'eyJhbGci'],
    ['-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----', MASK, 'MIIEow'],
  ])('masks %j', (text, expected, secret) => {
    const scrubbed = scrubSecrets(text);
    expect(scrubbed).toContain(expected);
    expect(scrubbed).not.toContain(secret);
    // Twice is once.
    expect(scrubSecrets(scrubbed)).toBe(scrubbed);
  });

  it.each([
    'agent exited with code 2 without finishing the job',
    'agent token expired (exit code 3)',
    'the job lease token 4 is stale (tokenExpired: false)',
    'ssh://git@github.com/acme/app.git and git@github.com:acme/app.git',
    'branch task-abcdefghijklmnopqrstuvwxyz0123 at 0123456789abcdef0123456789abcdef01234567',
    'https://github.com/acme/app/pull/12',
  ])('leaves %j as it is', (text) => {
    expect(scrubSecrets(text)).toBe(text);
  });

  it('masks the values it is told are secret, verbatim, wherever they stand', () => {
    const scrub = secretScrubber(['a-custom-secret-value', 'short']);
    expect(scrub('the key in use is a-custom-secret-value, really')).toBe(`the key in use is ${MASK}, really`);
    // too short to mask verbatim without masking ordinary words
    expect(scrub('a short word')).toBe('a short word');
  });

  it('finds the secret values of an environment by their names, and URL passwords', () => {
    const values = secretValuesIn({
      ANTHROPIC_API_KEY: 'anthropic-key-value',
      GANTRY_GITHUB_TOKEN: 'github-token-value',
      GANTRY_GITHUB_WEBHOOK_SECRETS: 'first-secret-1,second-secret-2',
      GANTRY_HTTP_TOKEN: 'http-token-value-0123',
      CLAUDE_CODE_OAUTH_TOKEN: 'oauth-token-value',
      GANTRY_DATABASE_URL: 'postgres://gantry:db-password-1@db:5432/gantry',
      GANTRY_GITHUB_APP_PRIVATE_KEY_PATH: '/etc/gantry/app.pem',
      GANTRY_TOKEN_EXPIRED_PATTERN: 'token (has )?expired',
      HOME: '/home/gantry',
    });
    expect(values).toEqual(
      expect.arrayContaining(['anthropic-key-value', 'github-token-value', 'first-secret-1', 'second-secret-2', 'http-token-value-0123', 'oauth-token-value', 'db-password-1']),
    );
    expect(values).not.toContain('/etc/gantry/app.pem');
    expect(values).not.toContain('token (has )?expired');
    expect(values).not.toContain('/home/gantry');
  });

  it('scrubs every string inside a JSON value, leaving keys, numbers and structure', () => {
    expect(scrubStrings({ reason: 'Bearer abcdefghijklmnop', n: 3, list: ['password=hunter22'], nested: { ok: true } })).toEqual({
      reason: `Bearer ${MASK}`,
      n: 3,
      list: [`password=${MASK}`],
      nested: { ok: true },
    });
  });
});
