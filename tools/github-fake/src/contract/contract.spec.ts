import { readFileSync } from 'node:fs';
import { schema as githubSchema, validate as validateDocument } from '@octokit/graphql-schema';
import { Ajv, type ValidateFunction } from 'ajv';
import addFormatsModule from 'ajv-formats';
import { buildSchema, execute, parse, type GraphQLSchema } from 'graphql';
import { startGitHubFake, type GitHubFake } from '../index.js';
import { startWebhookReceiver } from '../testing/harness.js';
import { runScenario, type ScenarioRecord } from './scenario.js';

/*
 * The fake kept honest: what it answers and sends is held against GitHub's own published
 * descriptions — the REST OpenAPI description (@octokit/openapi), the webhooks description
 * (@octokit/openapi-webhooks), both vendored as subsets in contract/, and the GraphQL schema
 * (@octokit/graphql-schema).
 */

type OpenApiDocument = { info: Record<string, unknown>; paths?: Record<string, Record<string, any>>; webhooks?: Record<string, any>; components: Record<string, any> };

const restDocument = JSON.parse(readFileSync(new URL('../../contract/rest-openapi.subset.json', import.meta.url), 'utf8')) as OpenApiDocument;
const webhooksDocument = JSON.parse(readFileSync(new URL('../../contract/webhooks-openapi.subset.json', import.meta.url), 'utf8')) as OpenApiDocument;

function pointer(...segments: string[]): string {
  return `#/${segments.map((s) => encodeURIComponent(s.replace(/~/g, '~0').replace(/\//g, '~1'))).join('/')}`;
}

function resolveLocal(document: OpenApiDocument, node: any): any {
  while (node && typeof node.$ref === 'string') {
    node = node.$ref
      .slice(2)
      .split('/')
      .map((part: string) => part.replace(/~1/g, '/').replace(/~0/g, '~'))
      .reduce((n: any, part: string) => n?.[part], document);
  }
  return node;
}

// ajv-formats is CommonJS with `exports.default`: under NodeNext its default import is the module.
const addFormats = ((addFormatsModule as unknown as { default?: unknown }).default ?? addFormatsModule) as unknown as (ajv: Ajv) => Ajv;

/**
 * OpenAPI 3.0's `nullable: true` next to an `enum` without null (GitHub writes check runs' `conclusion`
 * so): GitHub answers null there (a check run in progress), and OpenAPI 3.0 means null to be allowed,
 * but a JSON Schema validator reads the enum literally. Null is added to such enums.
 */
function allowNullInNullableEnums(node: unknown): void {
  if (Array.isArray(node)) return node.forEach(allowNullInNullableEnums);
  if (!node || typeof node !== 'object') return;
  const schema = node as Record<string, unknown>;
  if (schema.nullable === true && Array.isArray(schema.enum) && !schema.enum.includes(null)) schema.enum = [...schema.enum, null];
  Object.values(schema).forEach(allowNullInNullableEnums);
}
allowNullInNullableEnums(restDocument);

function validator() {
  // OpenAPI documents are not JSON Schemas; only the schema objects inside them are compiled.
  const ajv = new Ajv({ strict: false, allErrors: true, validateFormats: true });
  addFormats(ajv);
  ajv.addSchema(restDocument, 'rest');
  ajv.addSchema(webhooksDocument, 'webhooks');
  return ajv;
}

const ajv = validator();
const problems = (validate: ValidateFunction) => (validate.errors ?? []).map((e) => `${e.instancePath} ${e.message} ${JSON.stringify(e.params)}`).slice(0, 10);

let fake: GitHubFake;
let receiver: Awaited<ReturnType<typeof startWebhookReceiver>>;
let scenario: ScenarioRecord;

beforeAll(async () => {
  receiver = await startWebhookReceiver('contract');
  fake = await startGitHubFake({ webhooks: [{ url: receiver.url, secret: 'contract' }] });
  scenario = await runScenario(fake, 'acme', 'contract');
});

afterAll(async () => {
  await fake?.close();
  await receiver?.close();
});

describe('REST answers validate against GitHub’s OpenAPI description', () => {
  it('covers every operation the fake serves, including refusals', () => {
    const served = new Set(scenario.rest.map((e) => `${e.method} ${e.route} ${e.status}`));
    for (const expected of [
      'GET /repos/{owner}/{repo} 200',
      'GET /repos/{owner}/{repo} 404',
      'POST /repos/{owner}/{repo}/pulls 201',
      'POST /repos/{owner}/{repo}/pulls 422',
      'GET /repos/{owner}/{repo}/pulls 200',
      'GET /repos/{owner}/{repo}/pulls/{pull_number} 200',
      'GET /repos/{owner}/{repo}/pulls/{pull_number} 404',
      'PATCH /repos/{owner}/{repo}/pulls/{pull_number} 200',
      'PUT /repos/{owner}/{repo}/pulls/{pull_number}/merge 200',
      'PUT /repos/{owner}/{repo}/pulls/{pull_number}/merge 405',
      'PUT /repos/{owner}/{repo}/pulls/{pull_number}/merge 409',
      'POST /repos/{owner}/{repo}/check-runs 201',
      'GET /repos/{owner}/{repo}/check-runs/{check_run_id} 200',
      'PATCH /repos/{owner}/{repo}/check-runs/{check_run_id} 200',
      'GET /repos/{owner}/{repo}/commits/{ref}/check-runs 200',
      'GET /repos/{owner}/{repo}/commits/{ref}/status 200',
      'POST /repos/{owner}/{repo}/statuses/{sha} 201',
    ]) {
      expect(served).toContain(expected);
    }
  });

  it('every answer has the schema GitHub documents for that operation and status', () => {
    const failures: string[] = [];
    for (const exchange of scenario.rest) {
      const operation = restDocument.paths?.[exchange.route]?.[exchange.method.toLowerCase()];
      if (!operation) {
        failures.push(`${exchange.method} ${exchange.route}: not an operation of the vendored description`);
        continue;
      }
      const response = resolveLocal(restDocument, operation.responses[String(exchange.status)]);
      if (!response) {
        failures.push(`${exchange.method} ${exchange.route}: GitHub documents no ${exchange.status} answer`);
        continue;
      }
      if (!response.content) continue; // e.g. 204: no body
      const schemaPath = operation.responses[String(exchange.status)].$ref
        ? `rest#${operation.responses[String(exchange.status)].$ref.slice(1)}/content/application~1json/schema`
        : `rest${pointer('paths', exchange.route, exchange.method.toLowerCase(), 'responses', String(exchange.status), 'content', 'application/json', 'schema')}`;
      const check = ajv.getSchema(schemaPath);
      if (!check) {
        failures.push(`${exchange.method} ${exchange.route} ${exchange.status}: no schema at ${schemaPath}`);
        continue;
      }
      if (!check(exchange.body)) failures.push(`${exchange.method} ${exchange.route} ${exchange.status}: ${problems(check).join('; ')}`);
    }
    expect(failures).toEqual([]);
  });

  it('the validation bites: a pull request without its number, or with a mergeable that is not a boolean, fails', () => {
    const check = ajv.getSchema(`rest${pointer('paths', '/repos/{owner}/{repo}/pulls/{pull_number}', 'get', 'responses', '200', 'content', 'application/json', 'schema')}`)!;
    const pull = scenario.rest.find((e) => e.route === '/repos/{owner}/{repo}/pulls/{pull_number}' && e.method === 'GET' && e.status === 200)!.body as Record<string, unknown>;
    expect(check(pull)).toBe(true);
    const { number: _number, ...withoutNumber } = pull;
    expect(check(withoutNumber)).toBe(false);
    expect(check({ ...pull, mergeable: 'yes' })).toBe(false);
  });
});

/** The description's name for a delivery: `event-action`, or the event alone for events without actions. */
const kindOf = (d: { event: string; action: string | null }) => (d.action === null ? d.event : `${d.event}-${d.action}`).replace(/_/g, '-');

describe('webhook bodies validate against GitHub’s webhooks description', () => {
  const kinds = Object.keys(webhooksDocument.webhooks ?? {});

  it('covers every event and action the fake sends', () => {
    const sent = new Set(scenario.deliveries.map(kindOf));
    expect([...sent].sort()).toEqual([...kinds].sort());
  });

  it('every delivery body has the schema of its event and action', () => {
    const failures: string[] = [];
    for (const delivery of scenario.deliveries) {
      const kind = kindOf(delivery);
      const check = ajv.getSchema(`webhooks${pointer('webhooks', kind, 'post', 'requestBody', 'content', 'application/json', 'schema')}`);
      if (!check) {
        failures.push(`${kind}: not in the vendored description`);
        continue;
      }
      if (!check(delivery.payload)) failures.push(`${kind}: ${problems(check).join('; ')}`);
    }
    expect(failures).toEqual([]);
  });

  it('were all delivered, signed, to the receiver', async () => {
    const ids = new Set(scenario.deliveries.map((d) => d.id));
    const received = await receiver.waitFor((d) => ids.has(d.id), ids.size);
    expect(received.every((d) => d.signatureValid)).toBe(true);
  });
});

/**
 * GitHub's times: UTC, ISO 8601 to the second (`2011-01-26T19:01:12Z`, as in every example of its descriptions), never
 * with a fraction; a commit's git time keeps its author's offset (`2019-05-15T15:20:30-07:00`). Yields every time in
 * `value` that is not so, with where it is.
 */
function* timesNotGitHubs(value: unknown, at: string): Generator<string> {
  if (typeof value === 'string') {
    if (/^\d{4}-\d{2}-\d{2}T/.test(value) && !/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(Z|[+-]\d{2}:\d{2})$/.test(value)) yield `${at}: ${value}`;
    else if (/(_at|At)$/.test(at) && value !== '' && !/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/.test(value)) yield `${at}: ${value}`;
    return;
  }
  if (!value || typeof value !== 'object') return;
  for (const [key, inner] of Object.entries(value)) yield* timesNotGitHubs(inner, Array.isArray(value) ? `${at}[${key}]` : `${at}.${key}`);
}

describe('times are GitHub’s: UTC, to the second', () => {
  it('in every REST answer, every webhook body and every GraphQL answer of the scenario', () => {
    const found = [
      ...scenario.rest.flatMap((e) => [...timesNotGitHubs(e.body, `${e.method} ${e.route} ${e.status}`)]),
      ...scenario.deliveries.flatMap((d) => [...timesNotGitHubs(d.payload, kindOf(d))]),
      ...scenario.graphql.flatMap((e) => [...timesNotGitHubs(e.data, e.document.split('\n')[0]!)]),
    ];
    expect(found.slice(0, 20)).toEqual([]);
  });

  it('the check bites: a time with milliseconds, or not in UTC, is found', () => {
    expect([...timesNotGitHubs({ updated_at: '2026-12-07T06:48:35.123Z', timestamp: '2026-12-07T06:48:35+01:00', created_at: '2026-12-07T06:48:35+01:00' }, 'x')]).toEqual([
      'x.updated_at: 2026-12-07T06:48:35.123Z',
      'x.created_at: 2026-12-07T06:48:35+01:00',
    ]);
  });
});

describe('GraphQL documents and answers agree with GitHub’s schema', () => {
  let schema: GraphQLSchema;
  beforeAll(() => {
    schema = buildSchema(githubSchema.idl, { assumeValidSDL: true });
  });

  it('every document the scenario sent is valid against GitHub’s schema', () => {
    for (const exchange of scenario.graphql) expect(validateDocument(exchange.document)).toEqual([]);
  });

  it('every answer has the types the schema gives its fields (replayed through the schema)', async () => {
    const failures: string[] = [];
    for (const exchange of scenario.graphql) {
      if (exchange.data === null) continue;
      const replay = await execute({
        schema,
        document: parse(exchange.document),
        rootValue: exchange.data,
        variableValues: exchange.variables,
        // Read each field from the answer by its response key: the schema coerces and checks it
        // (enums must be GitHub's values, non-null fields must be there, lists must be lists).
        fieldResolver: (source, _args, _context, info) => (source as Record<string, unknown>)[String(info.path.key)],
      });
      const unexpected = (replay.errors ?? []).filter((e) => !(exchange.errors ?? []).some((x) => JSON.stringify(x.path) === JSON.stringify(e.path)));
      if (unexpected.length) failures.push(`${exchange.document.split('\n')[0]}: ${unexpected.map((e) => e.message).join('; ')}`);
    }
    expect(failures).toEqual([]);
  });

  it('the replay bites: a value outside GitHub’s enum fails', async () => {
    const exchange = scenario.graphql.find((e) => e.document.includes('query PullState') && e.data !== null)!;
    const data = JSON.parse(JSON.stringify(exchange.data)) as { repository: { pullRequest: { mergeStateStatus: string } } };
    data.repository.pullRequest.mergeStateStatus = 'GREEN';
    const replay = await execute({
      schema,
      document: parse(exchange.document),
      rootValue: data,
      variableValues: exchange.variables,
      fieldResolver: (source, _args, _context, info) => (source as Record<string, unknown>)[String(info.path.key)],
    });
    expect(replay.errors?.[0]?.message).toMatch(/MergeStateStatus/);
  });

  it('refusals carry GitHub’s error entry shape (type, path, locations, message)', () => {
    const refusals = scenario.graphql.flatMap((e) => e.errors ?? []);
    expect(refusals.map((e) => e.message)).toEqual(
      expect.arrayContaining([
        'Auto merge is not allowed for this repository',
        'Pull request Pull request is in clean status',
        'Could not resolve to a PullRequest with the number of 999.',
      ]),
    );
    for (const refusal of refusals) {
      expect(refusal).toEqual({ type: expect.any(String), path: expect.any(Array), locations: expect.any(Array), message: expect.any(String) });
    }
  });
});
