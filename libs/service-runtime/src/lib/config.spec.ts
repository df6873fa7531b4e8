import { serviceSettings, shutdownGraceSetting, type ServiceConfig } from './config.js';
import { defineSettings, readSettings, SettingsError, settingsOf } from './settings.js';

const runtime = serviceSettings({ service: 'config-test', schema: 'jobs', port: 3101, commandsOverHttp: true });
const read = (env: Record<string, string>): ServiceConfig => settingsOf(runtime, env);

describe("the runtime's settings refuse what a timer or JetStream cannot hold, naming the variable", () => {
  it('GANTRY_PRUNE_INTERVAL_MS of 30 days is refused: a timer holds at most 2^31 - 1 ms and would prune every millisecond', () => {
    expect(() => read({ GANTRY_PRUNE_INTERVAL_MS: String(30 * 24 * 3_600_000) })).toThrow(SettingsError);
    expect(() => read({ GANTRY_PRUNE_INTERVAL_MS: String(2 ** 31) })).toThrow(/GANTRY_PRUNE_INTERVAL_MS must be a whole number from 10 to 2147483647/);
    expect(read({ GANTRY_PRUNE_INTERVAL_MS: String(2 ** 31 - 1) }).retention.pruneIntervalMs).toBe(2 ** 31 - 1);
  });

  it("GANTRY_STREAM_MAX_AGE_MS beyond JetStream's nanosecond range is refused at start, not answered 'invalid JSON' by the server", () => {
    expect(() => read({ GANTRY_STREAM_MAX_AGE_MS: '10000000000000' })).toThrow(/GANTRY_STREAM_MAX_AGE_MS must be a whole number from 0 to 9223372036854/);
    expect(read({ GANTRY_STREAM_MAX_AGE_MS: '9223372036854', GANTRY_RECEIPT_TTL_MS: '9223372036854' }).streamLimits.maxAgeMs).toBe(9_223_372_036_854);
    expect(read({ GANTRY_STREAM_MAX_AGE_MS: '0' }).streamLimits.maxAgeMs).toBe(0);
  });
});

describe('the receipt window against the streams\' max age (docs/architecture.md, "How late a command comes again")', () => {
  it('refuses receipts that go before the streams drop a message: an event handed back that long after its handler sent a command would have it done again', () => {
    const day = 24 * 3_600_000;
    expect(() => read({ GANTRY_STREAM_MAX_AGE_MS: String(14 * day) })).toThrow(SettingsError);
    expect(() => read({ GANTRY_STREAM_MAX_AGE_MS: String(14 * day) })).toThrow(/GANTRY_RECEIPT_TTL_MS .*GANTRY_STREAM_MAX_AGE_MS/);
    expect(() => read({ GANTRY_RECEIPT_TTL_MS: String(day) })).toThrow(/GANTRY_RECEIPT_TTL_MS/);
    // equal (the defaults, seven days each), longer, or streams without an age limit
    expect(read({}).retention.receiptTtlMs).toBe(7 * day);
    expect(read({ GANTRY_STREAM_MAX_AGE_MS: String(day), GANTRY_RECEIPT_TTL_MS: String(day) }).retention.receiptTtlMs).toBe(day);
    expect(read({ GANTRY_STREAM_MAX_AGE_MS: '0', GANTRY_RECEIPT_TTL_MS: String(day) }).retention.receiptTtlMs).toBe(day);
  });
});

describe("the bounds on waiting for PostgreSQL (docs/configuration.md, 'Waiting for PostgreSQL')", () => {
  it('default to answers before a caller gives up: connect 5 s, query 8 s, keepalive 10 s, a session idle in a transaction 10 min', () => {
    expect(read({}).databaseTimeouts).toEqual({ connectMs: 5_000, queryMs: 8_000, keepAliveMs: 10_000, idleInTransactionMs: 600_000 });
  });

  it('are read from their variables', () => {
    const env = { GANTRY_DB_CONNECT_TIMEOUT_MS: '250', GANTRY_DB_QUERY_TIMEOUT_MS: '750', GANTRY_DB_KEEPALIVE_MS: '2000', GANTRY_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS: '0' };
    expect(read(env).databaseTimeouts).toEqual({ connectMs: 250, queryMs: 750, keepAliveMs: 2_000, idleInTransactionMs: 0 });
  });

  it.each([
    ['GANTRY_DB_CONNECT_TIMEOUT_MS', '0', 'from 100 to 600000'],
    ['GANTRY_DB_CONNECT_TIMEOUT_MS', '5s', 'from 100 to 600000'],
    ['GANTRY_DB_QUERY_TIMEOUT_MS', '0', 'from 100 to 2147483647'],
    ['GANTRY_DB_QUERY_TIMEOUT_MS', String(2 ** 31), 'from 100 to 2147483647'],
    ['GANTRY_DB_KEEPALIVE_MS', '999', 'from 1000 to 3600000'],
    ['GANTRY_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS', '-1', 'from 0 to 2147483647'],
  ])('%s=%s is refused at start, naming the variable and its range', (variable, value, range) => {
    expect(() => read({ [variable]: value })).toThrow(new RegExp(`${variable} must be a whole number ${range}`));
  });
});

describe('a variable two parts read', () => {
  it('is named once when it is refused', () => {
    const other = defineSettings({ name: 'other', token: Symbol('other'), variables: { GANTRY_SHUTDOWN_GRACE_MS: shutdownGraceSetting() }, build: (v) => v });
    const refused = (() => {
      try {
        readSettings([runtime, other] as never, { GANTRY_SHUTDOWN_GRACE_MS: 'soon' });
      } catch (error) {
        return error;
      }
      return null;
    })();
    expect(refused).toBeInstanceOf(SettingsError);
    expect((refused as SettingsError).problems).toEqual([{ variable: 'GANTRY_SHUTDOWN_GRACE_MS', problem: expect.stringContaining('whole number') }]);
  });
});

describe('the names a service is given for its schema, subjects and streams', () => {
  it.each([
    ['GANTRY_DB_SCHEMA', 'jobs-prod'],
    ['GANTRY_DB_SCHEMA', 'Jobs'],
    ['GANTRY_DB_SCHEMA', 'jobs; DROP TABLE events'],
    ['GANTRY_SUBJECT_ROOT', 'gantry prod'],
    ['GANTRY_SUBJECT_ROOT', 'gantry.*'],
    ['GANTRY_SUBJECT_ROOT', 'gantry..prod'],
    ['GANTRY_STREAM_PREFIX', 'GANTRY.'],
    ['GANTRY_STREAM_PREFIX', 'prod/GANTRY_'],
  ])('%s=%j is refused at start with the other settings, naming the variable, and not quoted', (variable, value) => {
    const refused = (() => {
      try {
        read({ [variable]: value, GANTRY_DB_POOL_MAX: '1' });
      } catch (error) {
        return error;
      }
      return null;
    })();
    expect(refused).toBeInstanceOf(SettingsError);
    // every problem at once: this one and the pool's
    expect((refused as SettingsError).problems.map((p) => p.variable).sort()).toEqual([variable, 'GANTRY_DB_POOL_MAX'].sort());
    expect((refused as SettingsError).message).not.toContain(value);
  });

  it('takes names made of what PostgreSQL and NATS take', () => {
    const config = read({ GANTRY_DB_SCHEMA: 'jobs_prod_2', GANTRY_SUBJECT_ROOT: 'acme.gantry', GANTRY_STREAM_PREFIX: 'ACME-GANTRY_' });
    expect(config.schema).toBe('jobs_prod_2');
    expect(config.naming).toEqual({ subjectRoot: 'acme.gantry', streamPrefix: 'ACME-GANTRY_' });
  });
});
