import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';
import { checkCompose, GANTRY_APP_PORTS, readNatsJetStreamConfig } from './compose-checks.js';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
// Compose resolves YAML merge keys (<<: *anchor); so must we.
const readCompose = () => parse(readFileSync(path.join(repoRoot, 'docker-compose.yml'), 'utf8'), { merge: true });
const APPS = Object.keys(GANTRY_APP_PORTS);

describe("the repository's docker-compose.yml", () => {
  const compose = readCompose();

  it('runs NATS, PostgreSQL and the five apps', () => {
    expect(Object.keys(compose.services).sort()).toEqual(
      ['job-service', 'nats', 'postgres', 'pr-service', 'runner', 'workflow-engine', 'worktree-service'],
    );
  });

  it('builds each app from the one Dockerfile with its own APP argument and port', () => {
    const builds = Object.fromEntries(APPS.map((app) => [app, compose.services[app].build]));

    expect(builds).toEqual(
      Object.fromEntries(
        APPS.map((app) => [app, { context: '.', dockerfile: 'Dockerfile', args: { APP: app, PORT: String(GANTRY_APP_PORTS[app]) } }]),
      ),
    );
  });

  it("gives the pr-service the GitHub token and webhook secrets of the shell it is started from (empty: none)", () => {
    expect(compose.services['pr-service'].environment).toMatchObject({
      GANTRY_GITHUB_TOKEN: '${GANTRY_GITHUB_TOKEN:-}',
      GANTRY_GITHUB_API_URL: '${GANTRY_GITHUB_API_URL:-}',
      GANTRY_GITHUB_WEBHOOK_SECRETS: '${GANTRY_GITHUB_WEBHOOK_SECRETS:-}',
    });
  });

  it('gives every app the NATS and PostgreSQL of the compose network and waits until they are healthy', () => {
    for (const app of APPS) {
      const service = compose.services[app];
      expect({ app, ...service.environment }).toMatchObject({
        app,
        GANTRY_DATABASE_URL: 'postgres://postgres@postgres:5432/gantry',
        GANTRY_NATS_URL: 'nats://nats:4222',
        PORT: String(GANTRY_APP_PORTS[app]),
        GANTRY_HTTP_HOST: '0.0.0.0',
        // compose refuses to start without it: the apps listen on the container network.
        GANTRY_HTTP_TOKEN: expect.stringMatching(/^\$\{GANTRY_HTTP_TOKEN:\?/),
      });
      expect(service.depends_on).toMatchObject({ nats: { condition: 'service_healthy' }, postgres: { condition: 'service_healthy' } });
    }
  });

  it('runs NATS 2.10 with JetStream that fsyncs every write, and PostgreSQL 15 with a health check', () => {
    const { nats, postgres } = compose.services;
    expect(nats.image).toBe('nats:2.10-alpine');
    expect(nats.command).toEqual(['nats-server', '--config', '/etc/nats/gantry.conf']);
    expect(nats.volumes).toContain('./deploy/nats.conf:/etc/nats/gantry.conf:ro');
    expect(readNatsJetStreamConfig(readFileSync(path.join(repoRoot, 'deploy/nats.conf'), 'utf8'))).toEqual({
      jetstream: true,
      syncInterval: 'always',
    });
    expect(postgres.image).toBe('postgres:15');
    expect(postgres.healthcheck.test).toEqual(['CMD-SHELL', 'pg_isready -h 127.0.0.1 -U postgres -d gantry']);
  });

  it('gives the worktree-service and the runner the same worktrees volume', () => {
    const { runner, 'worktree-service': worktreeService } = compose.services;
    expect(worktreeService.volumes).toEqual(['worktrees:/var/lib/gantry/worktrees']);
    expect(runner.volumes).toEqual(['worktrees:/var/lib/gantry/worktrees']);
    expect(runner.environment.GANTRY_WORKTREE_ROOT).toBe('/var/lib/gantry/worktrees');
    expect(worktreeService.environment.GANTRY_WORKTREE_ROOT).toBe('/var/lib/gantry/worktrees');
  });

  it('passes every check, including that each APP names an app with a src/main.ts', () => {
    expect(checkCompose(compose, repoRoot)).toEqual([]);
  });
});

describe('reading the JetStream settings of a NATS configuration', () => {
  it('finds sync_interval inside the jetstream block', () => {
    expect(readNatsJetStreamConfig('jetstream {\n  store_dir: /data\n  sync_interval: "always"\n}\n')).toEqual({ jetstream: true, syncInterval: 'always' });
  });

  it('ignores a commented-out sync_interval and one outside the jetstream block', () => {
    expect(readNatsJetStreamConfig('sync_interval: always\njetstream {\n  # sync_interval: always\n  store_dir: /data\n}\n')).toEqual({ jetstream: true });
  });

  it('reports a configuration without JetStream', () => {
    expect(readNatsJetStreamConfig('listen: 0.0.0.0:4222\n')).toEqual({ jetstream: false });
  });
});

describe('checking a compose file', () => {
  let fakeRepo: string;

  // A repository with the files the compose file points at, in which each test breaks one thing.
  beforeEach(() => {
    fakeRepo = mkdtempSync(path.join(os.tmpdir(), 'gantry-deploy-'));
    writeFileSync(path.join(fakeRepo, 'Dockerfile'), 'FROM node:20-slim\n');
    mkdirSync(path.join(fakeRepo, 'deploy'));
    writeFileSync(path.join(fakeRepo, 'deploy/nats.conf'), 'jetstream {\n  sync_interval: always\n}\n');
    for (const app of APPS) {
      mkdirSync(path.join(fakeRepo, 'apps', app, 'src'), { recursive: true });
      writeFileSync(path.join(fakeRepo, 'apps', app, 'src/main.ts'), '');
    }
  });
  afterEach(() => rmSync(fakeRepo, { recursive: true, force: true }));

  it('finds nothing wrong when every referenced file exists', () => {
    expect(checkCompose(readCompose(), fakeRepo)).toEqual([]);
  });

  it('reports a NATS configuration that lets JetStream acknowledge before fsync', () => {
    writeFileSync(path.join(fakeRepo, 'deploy/nats.conf'), 'jetstream {\n  sync_interval: 2m\n}\n');

    expect(checkCompose(readCompose(), fakeRepo)).toEqual([
      'nats: ./deploy/nats.conf does not set jetstream sync_interval: always (found 2m)',
    ]);
  });

  it('reports NATS older than 2.10 and PostgreSQL other than 15', () => {
    const compose = readCompose();
    compose.services.nats.image = 'nats:2.9.10';
    compose.services.postgres.image = 'postgres:16';

    expect(checkCompose(compose, fakeRepo)).toEqual([
      'nats: image nats:2.9.10 is not NATS 2.10 or newer (sync_interval needs 2.10)',
      'postgres: image postgres:16 is not PostgreSQL 15',
    ]);
  });

  it('reports an app whose APP build argument names an app without src/main.ts', () => {
    rmSync(path.join(fakeRepo, 'apps/pr-service/src/main.ts'));
    const compose = readCompose();
    compose.services.runner.build.args.APP = 'ghost-service';

    expect(checkCompose(compose, fakeRepo)).toEqual([
      'pr-service: apps/pr-service/src/main.ts does not exist (the image would have no entry point)',
      'runner: the APP build argument names another app (ghost-service)',
      'runner: apps/ghost-service/src/main.ts does not exist (the image would have no entry point)',
    ]);
  });

  it('reports a missing app, a wrong port and an app that does not wait for healthy infrastructure', () => {
    const compose = readCompose();
    delete compose.services['workflow-engine'];
    compose.services['job-service'].environment.PORT = '8080';
    compose.services['job-service'].depends_on = ['nats', 'postgres'];

    expect(checkCompose(compose, fakeRepo)).toEqual([
      'job-service: PORT is 8080, expected 3101',
      'job-service: does not wait for nats to be healthy',
      'job-service: does not wait for postgres to be healthy',
      'no service "workflow-engine"',
    ]);
  });

  it('reports an app bound to its loopback (its published port reaches nothing) and one open to the network without a token', () => {
    const compose = readCompose();
    compose.services['job-service'].environment.GANTRY_HTTP_HOST = '127.0.0.1';
    delete compose.services['pr-service'].environment.GANTRY_HTTP_TOKEN;
    delete compose.services.runner.environment.GANTRY_HTTP_TOKEN;

    expect(checkCompose(compose, fakeRepo)).toEqual([
      'job-service: GANTRY_HTTP_HOST is not 0.0.0.0 (the published port would reach nothing)',
      'pr-service: bound off loopback without GANTRY_HTTP_TOKEN (its commands would be open)',
    ]);
  });

  it('reports an app that docker stop would kill before its own shutdown grace ends', () => {
    const compose = readCompose();
    compose.services['job-service'].stop_grace_period = '30s';
    delete compose.services['workflow-engine'].stop_grace_period;
    compose.services.runner.stop_grace_period = '1m';
    compose.services.runner.environment.GANTRY_SHUTDOWN_GRACE_MS = '60000';

    expect(checkCompose(compose, fakeRepo)).toEqual([
      'job-service: stop_grace_period 30s is not longer than its GANTRY_SHUTDOWN_GRACE_MS (30000 ms): docker stop would SIGKILL it mid-stop',
      'workflow-engine: stop_grace_period 10s is not longer than its GANTRY_SHUTDOWN_GRACE_MS (30000 ms): docker stop would SIGKILL it mid-stop',
      'runner: stop_grace_period 1m is not longer than its GANTRY_SHUTDOWN_GRACE_MS (60000 ms): docker stop would SIGKILL it mid-stop',
    ]);
  });

  it('reports a runner that does not see the worktrees of the worktree-service', () => {
    const compose = readCompose();
    compose.services.runner.volumes = ['runner-worktrees:/var/lib/gantry/worktrees'];

    expect(checkCompose(compose, fakeRepo)).toEqual([
      'worktree-service (worktrees:/var/lib/gantry/worktrees) and runner (runner-worktrees:/var/lib/gantry/worktrees) do not share their worktrees volume',
    ]);
  });
});
