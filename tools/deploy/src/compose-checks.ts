import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';

/** The five apps and their HTTP ports (docs/DEVELOPING.md). */
export const GANTRY_APP_PORTS: Readonly<Record<string, number>> = {
  'job-service': 3101,
  'workflow-engine': 3102,
  'pr-service': 3103,
  'worktree-service': 3104,
  runner: 3105,
};

type Service = Record<string, unknown>;

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** `environment:` and `build.args:` come as a map or as a list of `KEY=value`. */
function keyValues(value: unknown): Record<string, string> {
  if (Array.isArray(value)) {
    return Object.fromEntries(
      value.map(String).map((entry) => {
        const at = entry.indexOf('=');
        return at < 0 ? [entry, ''] : [entry.slice(0, at), entry.slice(at + 1)];
      }),
    );
  }
  if (isRecord(value)) return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, v == null ? '' : String(v)]));
  return {};
}

/** `depends_on:` as a list (condition service_started) or a map of conditions. */
function dependencies(service: Service): Record<string, string> {
  const value = service['depends_on'];
  if (Array.isArray(value)) return Object.fromEntries(value.map((name) => [String(name), 'service_started']));
  if (isRecord(value)) {
    return Object.fromEntries(
      Object.entries(value).map(([name, spec]) => [name, isRecord(spec) ? String(spec['condition'] ?? 'service_started') : 'service_started']),
    );
  }
  return {};
}

interface Mount { source: string; target: string }

function mounts(service: Service): Mount[] {
  const value = service['volumes'];
  if (!Array.isArray(value)) return [];
  return value.flatMap((entry): Mount[] => {
    if (typeof entry === 'string') {
      const [source = '', target = ''] = entry.split(':');
      return [{ source, target }];
    }
    if (isRecord(entry)) return [{ source: String(entry['source'] ?? ''), target: String(entry['target'] ?? '') }];
    return [];
  });
}

const isNamedVolume = (source: string) => source !== '' && !/^[./~]/.test(source);

function commandWords(service: Service): string[] {
  const value = service['command'];
  if (Array.isArray(value)) return value.map(String);
  if (typeof value === 'string') return value.split(/\s+/).filter(Boolean);
  return [];
}

function imageVersion(image: unknown, repository: string): [number, number] | undefined {
  const match = new RegExp(`^(?:docker\\.io/)?(?:library/)?${repository}:(\\d+)(?:\\.(\\d+))?`).exec(String(image ?? ''));
  return match ? [Number(match[1]), Number(match[2] ?? 0)] : undefined;
}

export interface NatsJetStreamConfig {
  jetstream: boolean;
  syncInterval?: string;
}

/** The JetStream settings of a nats-server configuration file (comments ignored). */
export function readNatsJetStreamConfig(text: string): NatsJetStreamConfig {
  const source = text.replace(/(^|\s)(#|\/\/).*$/gm, '$1');
  const block = /(?:^|\s)jetstream\s*[:=]?\s*\{/m.exec(source);
  if (!block) {
    const flag = /(?:^|\s)jetstream\s*[:=]\s*"?(enabled|true|on)"?\s*$/im.exec(source);
    return { jetstream: flag !== null };
  }
  let depth = 1;
  let end = block.index + block[0].length;
  while (end < source.length && depth > 0) {
    if (source[end] === '{') depth += 1;
    if (source[end] === '}') depth -= 1;
    end += 1;
  }
  const body = source.slice(block.index + block[0].length, end - 1);
  const syncInterval = /(?:^|\s)sync_interval\s*[:=]\s*"?([^"\s]+)"?/m.exec(body)?.[1];
  return syncInterval === undefined ? { jetstream: true } : { jetstream: true, syncInterval };
}

/**
 * What is wrong with docker-compose.yml (already parsed, YAML merge keys resolved), as sentences;
 * empty when nothing is. Files the compose file names are looked up under repoRoot.
 */
export function checkCompose(compose: unknown, repoRoot: string): string[] {
  if (!isRecord(compose) || !isRecord(compose['services'])) return ['the compose file has no services'];
  const services = compose['services'] as Record<string, unknown>;
  const problems: string[] = [];
  const service = (name: string): Service | undefined => {
    const value = services[name];
    if (isRecord(value)) return value;
    problems.push(`no service "${name}"`);
    return undefined;
  };

  const nats = service('nats');
  if (nats) problems.push(...checkNats(nats, repoRoot));

  const postgres = service('postgres');
  if (postgres) {
    const version = imageVersion(postgres['image'], 'postgres');
    if (!version || version[0] !== 15) problems.push(`postgres: image ${String(postgres['image'])} is not PostgreSQL 15`);
    if (!isRecord(postgres['healthcheck'])) problems.push('postgres: no healthcheck (apps wait for service_healthy)');
  }

  for (const [app, port] of Object.entries(GANTRY_APP_PORTS)) {
    const definition = service(app);
    if (definition) problems.push(...checkApp(app, port, definition, repoRoot));
  }

  problems.push(...checkSharedWorktrees(services));
  return problems;
}

function checkNats(nats: Service, repoRoot: string): string[] {
  const problems: string[] = [];
  const version = imageVersion(nats['image'], 'nats');
  if (!version || version[0] < 2 || (version[0] === 2 && version[1] < 10)) {
    problems.push(`nats: image ${String(nats['image'])} is not NATS 2.10 or newer (sync_interval needs 2.10)`);
  }
  const words = commandWords(nats);
  const configAt = words.findIndex((word) => word === '-c' || word === '--config');
  const configPath = configAt >= 0 ? words[configAt + 1] : undefined;
  if (!configPath) {
    problems.push('nats: no --config file, so JetStream cannot have sync_interval: always');
    return problems;
  }
  const mount = mounts(nats).find((m) => m.target === configPath);
  if (!mount || isNamedVolume(mount.source)) {
    problems.push(`nats: the config file ${configPath} is not mounted from the repository`);
    return problems;
  }
  const hostPath = path.resolve(repoRoot, mount.source);
  if (!existsSync(hostPath)) {
    problems.push(`nats: the config file ${mount.source} does not exist`);
    return problems;
  }
  const config = readNatsJetStreamConfig(readFileSync(hostPath, 'utf8'));
  const jetstreamFlag = words.includes('-js') || words.includes('--jetstream');
  if (!config.jetstream && !jetstreamFlag) problems.push(`nats: ${mount.source} does not enable JetStream`);
  if (config.syncInterval !== 'always') {
    problems.push(`nats: ${mount.source} does not set jetstream sync_interval: always (found ${config.syncInterval ?? 'nothing'})`);
  }
  if (!isRecord(nats['healthcheck'])) problems.push('nats: no healthcheck (apps wait for service_healthy)');
  return problems;
}

function checkApp(app: string, port: number, definition: Service, repoRoot: string): string[] {
  const problems: string[] = [];
  const build = definition['build'];
  if (!isRecord(build)) return [`${app}: not built from the repository's Dockerfile (no build section)`];

  const context = path.resolve(repoRoot, String(build['context'] ?? '.'));
  const dockerfile = path.resolve(context, String(build['dockerfile'] ?? 'Dockerfile'));
  if (!existsSync(dockerfile)) problems.push(`${app}: the Dockerfile ${path.relative(repoRoot, dockerfile)} does not exist`);

  const appArg = keyValues(build['args'])['APP'];
  if (!appArg) problems.push(`${app}: no APP build argument`);
  else {
    if (appArg !== app) problems.push(`${app}: the APP build argument names another app (${appArg})`);
    if (!existsSync(path.join(context, 'apps', appArg, 'src', 'main.ts'))) {
      problems.push(`${app}: apps/${appArg}/src/main.ts does not exist (the image would have no entry point)`);
    }
  }

  const env = keyValues(definition['environment']);
  if (env['PORT'] !== String(port)) problems.push(`${app}: PORT is ${env['PORT'] ?? 'unset'}, expected ${port}`);
  if (!/^postgres(ql)?:\/\/[^@]+@postgres:5432\//.test(env['GANTRY_DATABASE_URL'] ?? '')) {
    problems.push(`${app}: GANTRY_DATABASE_URL does not point at the postgres service`);
  }
  if (!/^nats:\/\/nats:4222$/.test(env['GANTRY_NATS_URL'] ?? '')) {
    problems.push(`${app}: GANTRY_NATS_URL does not point at the nats service`);
  }
  // A published port reaches the container's network interface, not its loopback; bound there, a
  // service's commands need a bearer token (the runner serves none).
  if (env['GANTRY_HTTP_HOST'] !== '0.0.0.0') problems.push(`${app}: GANTRY_HTTP_HOST is not 0.0.0.0 (the published port would reach nothing)`);
  if (app !== 'runner' && !env['GANTRY_HTTP_TOKEN']) problems.push(`${app}: bound off loopback without GANTRY_HTTP_TOKEN (its commands would be open)`);
  problems.push(...checkStopGrace(app, definition, env));
  const dependsOn = dependencies(definition);
  for (const infra of ['nats', 'postgres']) {
    if (dependsOn[infra] !== 'service_healthy') problems.push(`${app}: does not wait for ${infra} to be healthy`);
  }
  return problems;
}

/** The apps' own default of GANTRY_SHUTDOWN_GRACE_MS (README, "Every service"). */
const DEFAULT_SHUTDOWN_GRACE_MS = 30_000;
/** Compose's own default stop_grace_period. */
const DEFAULT_STOP_GRACE_PERIOD = '10s';

/** A compose duration (`1m30s`, `35s`, `500ms`) in milliseconds; null when it is not one. */
export function composeDurationMs(value: string): number | null {
  const units: Record<string, number> = { h: 3_600_000, m: 60_000, s: 1_000, ms: 1, us: 0.001 };
  const parts = [...value.matchAll(/(\d+(?:\.\d+)?)(h|ms|m|s|us)/g)];
  if (parts.length === 0 || parts.map((part) => part[0]).join('') !== value) return null;
  return parts.reduce((sum, part) => sum + Number(part[1]) * units[part[2]!]!, 0);
}

/**
 * docker stop sends SIGTERM, then SIGKILL after stop_grace_period: that must leave the app its whole
 * stop (GANTRY_SHUTDOWN_GRACE_MS, in which a runner stops its agents and gives its claims back), as
 * `npm run stop` does with its 5 s more.
 */
function checkStopGrace(app: string, definition: Service, env: Record<string, string>): string[] {
  const period = String(definition['stop_grace_period'] ?? DEFAULT_STOP_GRACE_PERIOD);
  const periodMs = composeDurationMs(period);
  const graceMs = env['GANTRY_SHUTDOWN_GRACE_MS'] ? Number(env['GANTRY_SHUTDOWN_GRACE_MS']) : DEFAULT_SHUTDOWN_GRACE_MS;
  if (periodMs === null) return [`${app}: stop_grace_period ${period} is not a duration`];
  if (periodMs <= graceMs) {
    return [`${app}: stop_grace_period ${period} is not longer than its GANTRY_SHUTDOWN_GRACE_MS (${graceMs} ms): docker stop would SIGKILL it mid-stop`];
  }
  return [];
}

/** The runner works in the worktrees the worktree-service creates: same named volume, same path. */
function checkSharedWorktrees(services: Record<string, unknown>): string[] {
  const mountOf = (name: string): Mount | undefined => {
    const definition = services[name];
    if (!isRecord(definition)) return undefined;
    const root = keyValues(definition['environment'])['GANTRY_WORKTREE_ROOT'];
    return mounts(definition).find((m) => m.target === root && isNamedVolume(m.source));
  };
  const worktreeService = mountOf('worktree-service');
  const runner = mountOf('runner');
  if (!worktreeService || !runner) {
    return ['worktree-service and runner must both mount a named volume at their GANTRY_WORKTREE_ROOT'];
  }
  if (worktreeService.source !== runner.source || worktreeService.target !== runner.target) {
    return [`worktree-service (${worktreeService.source}:${worktreeService.target}) and runner (${runner.source}:${runner.target}) do not share their worktrees volume`];
  }
  return [];
}
