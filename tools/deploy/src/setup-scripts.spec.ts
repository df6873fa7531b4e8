import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import pg from 'pg';
import { freePort } from '@gantry/testing';

// The set-up scripts run for real against this machine's NATS, PostgreSQL and nats-server binary;
// every test keeps its logs, pids and any server it starts in its own state directory.

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const adminUrl = 'postgres://postgres@127.0.0.1:5432/postgres';

interface ScriptResult { code: number | null; stdout: string; stderr: string }

function runScript(script: string, env: Record<string, string>, args: string[] = []): Promise<ScriptResult> {
  return runBash([path.join(repoRoot, 'scripts', script), ...args], env);
}

/** bash with these arguments, in the checkout, to its end: its exit code and what it printed. */
function runBash(args: string[], env: Record<string, string>): Promise<ScriptResult> {
  return new Promise((resolve, reject) => {
    const child = spawn('bash', args, {
      cwd: repoRoot,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => (stdout += chunk));
    child.stderr.on('data', (chunk) => (stderr += chunk));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

const accepts = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.once('connect', () => { socket.destroy(); resolve(true); });
    socket.once('error', () => resolve(false));
  });

async function waitUntil(condition: () => Promise<boolean> | boolean, what: string, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

const isAlive = (pid: number) => {
  try { process.kill(pid, 0); return true; } catch { return false; }
};

let stateDir: string;
const children: ChildProcess[] = [];

beforeEach(() => {
  stateDir = mkdtempSync(path.join(os.tmpdir(), 'gantry-setup-'));
  chmodSync(stateDir, 0o755); // a PostgreSQL started as the postgres user must reach its data dir
});

afterEach(() => {
  for (const child of children.splice(0)) if (child.exitCode === null) child.kill('SIGKILL');
  rmSync(stateDir, { recursive: true, force: true });
});

describe('ensure-infra.sh', () => {
  it('only checks the NATS and PostgreSQL that already run, and starts nothing', async () => {
    const result = await runScript('ensure-infra.sh', { GANTRY_STATE_DIR: stateDir });

    expect(result).toMatchObject({ code: 0, stderr: '' });
    expect(result.stdout).toContain('[infra] PostgreSQL answers on 127.0.0.1:5432');
    expect(result.stdout).toContain("[infra] database 'gantry' exists");
    expect(result.stdout).toContain('[infra] NATS JetStream answers on 127.0.0.1:4222');
    expect(result.stdout).not.toMatch(/starting|installing|creating/);
    expect(readdirSync(path.join(stateDir, 'pids'))).toEqual([]);
  });

  it('creates the database it is pointed at when it is missing, once', async () => {
    const database = `gantry_setup_${randomBytes(4).toString('hex')}`;
    const env = { GANTRY_STATE_DIR: stateDir, GANTRY_DATABASE_URL: `postgres://postgres@127.0.0.1:5432/${database}` };
    const admin = new pg.Client({ connectionString: adminUrl });
    await admin.connect();
    try {
      const first = await runScript('ensure-infra.sh', env);
      const second = await runScript('ensure-infra.sh', env);

      expect(first.code).toBe(0);
      expect(first.stdout).toContain(`[infra] created database '${database}'`);
      expect(second.code).toBe(0);
      expect(second.stdout).toContain(`[infra] database '${database}' exists`);
      const { rows } = await admin.query('select datname from pg_database where datname = $1', [database]);
      expect(rows).toEqual([{ datname: database }]);
    } finally {
      await admin.query(`drop database if exists "${database}"`);
      await admin.end();
    }
  });

  it('refuses a NATS server that runs without JetStream and says how to fix it', async () => {
    const port = await freePort();
    const nats = spawn('nats-server', ['-a', '127.0.0.1', '-p', String(port)], { stdio: 'ignore' });
    children.push(nats);
    await waitUntil(() => accepts(port), `nats-server on ${port}`);

    const result = await runScript('ensure-infra.sh', { GANTRY_STATE_DIR: stateDir, GANTRY_NATS_URL: `nats://127.0.0.1:${port}` });

    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`[infra] ERROR: the NATS server on 127.0.0.1:${port} runs without JetStream; restart it with -js`);
  });

  it('starts and tests without redis-server where it may not install packages (only a benchmark needs it)', async () => {
    // This machine's commands, but for redis-server.
    const bin = path.join(stateDir, 'bin');
    mkdirSync(bin);
    for (const dir of (process.env['PATH'] ?? '').split(':')) {
      if (!dir || !existsSync(dir)) continue;
      for (const name of readdirSync(dir)) {
        if (name !== 'redis-server' && !existsSync(path.join(bin, name))) symlinkSync(path.join(dir, name), path.join(bin, name));
      }
    }

    const result = await runScript('ensure-infra.sh', { GANTRY_STATE_DIR: stateDir, GANTRY_SKIP_APT: '1', PATH: bin });

    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    expect(result.stdout).toContain('[infra] redis-server is missing (only the lifecycle benchmark needs it');
    expect(result.stdout).toContain('[infra] infrastructure ready');
  });

  it('never prints the password of the database URL', async () => {
    // Trust auth takes any password, so the URL works as it would against a server that asks for it.
    const ok = await runScript('ensure-infra.sh', { GANTRY_STATE_DIR: stateDir, GANTRY_DATABASE_URL: 'postgres://postgres:s3cret-pw@127.0.0.1:5432/gantry' });
    const refused = await runScript('ensure-infra.sh', { GANTRY_STATE_DIR: stateDir, GANTRY_DATABASE_URL: 'mysql://root:s3cret-pw@127.0.0.1/gantry' });

    expect(ok.code).toBe(0);
    expect(ok.stdout).toContain('[infra] infrastructure ready: postgres://postgres:***@127.0.0.1:5432/gantry, nats://127.0.0.1:4222');
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain("(got 'mysql://root:***@127.0.0.1/gantry')");
    expect(ok.stdout + ok.stderr + refused.stdout + refused.stderr).not.toContain('s3cret-pw');
  });

  it('says at once that what listens on the NATS port is not NATS', async () => {
    const silent = net.createServer(() => undefined);
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const { port } = silent.address() as net.AddressInfo;
    try {
      const started = Date.now();
      const result = await runScript('ensure-infra.sh', { GANTRY_STATE_DIR: stateDir, GANTRY_NATS_URL: `nats://127.0.0.1:${port}`, GANTRY_INFRA_TIMEOUT: '30' });

      expect(result.code).toBe(1);
      expect(result.stderr).toContain(`[infra] ERROR: something listens on 127.0.0.1:${port} but does not answer as a NATS server`);
      expect(Date.now() - started).toBeLessThan(15_000);
    } finally {
      silent.close();
    }
  });

  it('refuses a database URL it cannot read', async () => {
    const result = await runScript('ensure-infra.sh', { GANTRY_STATE_DIR: stateDir, GANTRY_DATABASE_URL: 'mysql://root@127.0.0.1/gantry' });

    expect(result.code).toBe(1);
    expect(result.stderr).toBe(
      "[infra] ERROR: GANTRY_DATABASE_URL must look like postgres://user@host:port/database (got 'mysql://root@127.0.0.1/gantry')\n",
    );
  });

  it('starts nats-server with JetStream and a project-local PostgreSQL when nothing listens; stop.sh --infra stops both', async () => {
    const [natsPort, pgPort] = [await freePort(), await freePort()];
    const env = {
      GANTRY_STATE_DIR: stateDir,
      GANTRY_NATS_URL: `nats://127.0.0.1:${natsPort}`,
      GANTRY_DATABASE_URL: `postgres://postgres@127.0.0.1:${pgPort}/gantry`,
    };
    try {
      const started = await runScript('ensure-infra.sh', env);

      expect(started.code).toBe(0);
      expect(started.stdout).toContain(`[infra] starting nats-server with JetStream on 127.0.0.1:${natsPort}`);
      expect(started.stdout).toContain(`[infra] creating a project-local PostgreSQL cluster in ${stateDir}/postgres`);
      expect(started.stdout).toContain("[infra] created database 'gantry'");

      const nc = await connect({ servers: env.GANTRY_NATS_URL });
      const account = await (await jetstreamManager(nc)).getAccountInfo();
      await nc.close();
      expect(account.streams).toBe(0);

      const db = new pg.Client({ connectionString: env.GANTRY_DATABASE_URL });
      await db.connect();
      const { rows } = await db.query('select current_database() as name, current_setting($1) as port', ['port']);
      await db.end();
      expect(rows).toEqual([{ name: 'gantry', port: String(pgPort) }]);

      const natsPid = Number(readFileSync(path.join(stateDir, 'pids/nats-server.pid'), 'utf8'));
      const stopped = await runScript('stop.sh', env, ['--infra']);

      expect(stopped.code).toBe(0);
      expect(stopped.stdout).toContain(`[gantry] stopping the project-local PostgreSQL in ${stateDir}/postgres`);
      expect(isAlive(natsPid)).toBe(false);
      expect(await accepts(natsPort)).toBe(false);
      expect(await accepts(pgPort)).toBe(false);
    } finally {
      await runScript('stop.sh', env, ['--infra']);
    }
  });
});

describe('workspace.sh', () => {
  // A copy of the script in a checkout without node_modules, with stand-in `npm` and `sleep` first on PATH.
  function npmCheckout(failures: number): { root: string; env: Record<string, string>; calls: () => number } {
    const root = path.join(stateDir, 'checkout');
    const bin = path.join(stateDir, 'bin');
    mkdirSync(path.join(root, 'scripts'), { recursive: true });
    mkdirSync(bin);
    writeFileSync(path.join(root, 'scripts/workspace.sh'), readFileSync(path.join(repoRoot, 'scripts/workspace.sh')));
    writeFileSync(path.join(root, 'package-lock.json'), '{}');
    const count = path.join(stateDir, 'npm-calls');
    writeFileSync(
      path.join(bin, 'npm'),
      `#!/bin/bash\necho x >> ${JSON.stringify(count)}\nif (( $(wc -l < ${JSON.stringify(count)}) <= ${failures} )); then echo 'npm error code ECONNRESET' >&2; exit 1; fi\nmkdir -p node_modules && echo '{}' > node_modules/.package-lock.json\n`,
    );
    writeFileSync(path.join(bin, 'sleep'), '#!/bin/bash\nexit 0\n');
    chmodSync(path.join(bin, 'npm'), 0o755);
    chmodSync(path.join(bin, 'sleep'), 0o755);
    const calls = () => (existsSync(count) ? readFileSync(count, 'utf8').split('\n').filter(Boolean).length : 0);
    return { root, env: { PATH: `${bin}:${process.env['PATH'] ?? ''}` }, calls };
  }

  const ensure = (root: string, env: Record<string, string>) => runBash(['-c', `source ${JSON.stringify(path.join(root, 'scripts/workspace.sh'))} && ensure_node_modules`], env);

  it('runs npm ci again when the registry drops a connection, and installs', async () => {
    const { root, env, calls } = npmCheckout(2);
    const result = await ensure(root, env);
    expect(result.code).toBe(0);
    expect(calls()).toBe(3);
    expect(result.stdout).toContain('npm ci failed (try 1 of 3); trying again in 10 s');
    expect(existsSync(path.join(root, 'node_modules/.package-lock.json'))).toBe(true);
  });

  it('fails after the third failed npm ci', async () => {
    const { root, env, calls } = npmCheckout(5);
    const result = await ensure(root, env);
    expect(result.code).not.toBe(0);
    expect(calls()).toBe(3);
  });
});

// start.sh runs the apps of the checkout it lives in, on the ports of workspace.sh: a copy of the
// scripts in a directory of its own, with stand-in apps and a stand-in `npx` (the build), runs it on
// free ports without touching this checkout's apps.
async function standInCheckout(root: string): Promise<Record<string, string>> {
  const apps = ['job-service', 'workflow-engine', 'pr-service', 'worktree-service', 'runner'];
  mkdirSync(path.join(root, 'scripts'), { recursive: true });
  for (const script of ['workspace.sh', 'start.sh', 'stop.sh', 'ensure-infra.sh']) {
    writeFileSync(path.join(root, 'scripts', script), readFileSync(path.join(repoRoot, 'scripts', script)));
  }
  const ports = [] as number[];
  for (const _ of apps) ports.push(await freePort());
  const workspace = path.join(root, 'scripts/workspace.sh');
  const table = apps.map((app, i) => `[${app}]=${ports[i]}`).join(' ');
  const original = readFileSync(workspace, 'utf8');
  const patched = original.replace(/\[job-service\]=3101 [^\n]*\[runner\]=3105/, table);
  expect(patched).not.toBe(original);
  writeFileSync(workspace, patched);
  writeFileSync(path.join(root, 'package-lock.json'), '{}');
  mkdirSync(path.join(root, 'node_modules'));
  writeFileSync(path.join(root, 'node_modules/.package-lock.json'), '{}');
  for (const app of apps) {
    mkdirSync(path.join(root, 'apps', app, 'dist'), { recursive: true });
    // Ready a moment after it starts, like a real app; one that finds its port taken exits.
    writeFileSync(
      path.join(root, 'apps', app, 'dist/main.js'),
      `const s = require('node:http').createServer((q, r) => r.end('ok'));
       s.on('error', () => process.exit(1));
       setTimeout(() => s.listen(Number(process.env.PORT), '127.0.0.1'), 500);
       process.on('SIGTERM', () => process.exit(0));`,
    );
  }
  // The build: each start waits here until the other one arrives too (or 3 s pass), so two starts
  // at once leave their builds at the same moment.
  const bin = path.join(root, 'bin');
  mkdirSync(path.join(root, 'barrier'), { recursive: true });
  mkdirSync(bin);
  writeFileSync(
    path.join(bin, 'npx'),
    `#!/bin/sh\ntouch "${root}/barrier/$$"\nfor i in $(seq 60); do [ "$(ls "${root}/barrier" | wc -l)" -ge 2 ] && exit 0; sleep 0.05; done\n`,
  );
  chmodSync(path.join(bin, 'npx'), 0o755);
  return { PATH: `${bin}:${process.env['PATH']}`, GANTRY_GITHUB_TOKEN: 'not-used', GANTRY_WORKTREE_ROOT: path.join(root, 'worktrees') };
}

function runIn(root: string, script: string, env: Record<string, string>, args: string[] = []): Promise<ScriptResult> {
  return new Promise((resolve, reject) => {
    const child = spawn('bash', [path.join(root, 'scripts', script), ...args], { cwd: root, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => (stdout += chunk));
    child.stderr.on('data', (chunk) => (stderr += chunk));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

// The processes whose working directory is `root` and which run one of its apps.
function appsRunningIn(root: string): number[] {
  const pids = [] as number[];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const args = readFileSync(`/proc/${entry}/cmdline`, 'utf8');
      if (args.includes('dist/main.js') && readlinkSync(`/proc/${entry}/cwd`) === root) pids.push(Number(entry));
    } catch { /* gone meanwhile */ }
  }
  return pids;
}

describe('start.sh', () => {
  it('started twice at once, starts one set of apps, all of which stop.sh stops', async () => {
    const root = path.join(stateDir, 'a checkout');
    const env = { ...(await standInCheckout(root)), GANTRY_STATE_DIR: path.join(root, '.gantry') };
    try {
      const [first, second] = await Promise.all([runIn(root, 'start.sh', env), runIn(root, 'start.sh', env)]);

      expect([first.code, second.code]).toEqual([0, 0]);
      const started = (first.stdout + second.stdout).match(/\[gantry\] started job-service/g) ?? [];
      expect(started).toHaveLength(1);
      const running = appsRunningIn(root);
      expect(running).toHaveLength(5);
      const recorded = readdirSync(path.join(env.GANTRY_STATE_DIR, 'pids')).map((file) =>
        Number(readFileSync(path.join(env.GANTRY_STATE_DIR, 'pids', file), 'utf8')),
      );
      expect(recorded.sort()).toEqual(running.sort());

      expect((await runIn(root, 'stop.sh', env)).code).toBe(0);
      await waitUntil(() => appsRunningIn(root).length === 0, 'the apps to exit');
    } finally {
      for (const pid of appsRunningIn(root)) process.kill(pid, 'SIGKILL');
    }
  });
  it("names the port another program holds and the variable that moves the app, and starts it where that variable says", async () => {
    const root = path.join(stateDir, 'port checkout');
    const env = { ...(await standInCheckout(root)), GANTRY_STATE_DIR: path.join(root, '.gantry'), GANTRY_SKIP_BUILD: '1' };
    const holder = net.createServer();
    await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
    const taken = (holder.address() as net.AddressInfo).port;
    try {
      const refused = await runIn(root, 'start.sh', { ...env, GANTRY_JOB_SERVICE_PORT: String(taken) });

      expect(refused.code).not.toBe(0);
      expect(refused.stderr).toContain(`port ${taken} is taken`);
      expect(refused.stderr).toContain('GANTRY_JOB_SERVICE_PORT');
      expect(appsRunningIn(root)).toEqual([]);

      const moved = await freePort();
      const started = await runIn(root, 'start.sh', { ...env, GANTRY_JOB_SERVICE_PORT: String(moved) });

      expect(started.code).toBe(0);
      expect(started.stdout).toContain(`http://127.0.0.1:${moved}`);
      const answer = await fetch(`http://127.0.0.1:${moved}/ready`);
      expect(answer.status).toBe(200);
      expect((await runIn(root, 'stop.sh', env)).code).toBe(0);
    } finally {
      holder.close();
      for (const pid of appsRunningIn(root)) process.kill(pid, 'SIGKILL');
    }
  });
  it('refuses a port variable that is not a port, naming it', async () => {
    const root = path.join(stateDir, 'bad port checkout');
    const env = { ...(await standInCheckout(root)), GANTRY_STATE_DIR: path.join(root, '.gantry'), GANTRY_SKIP_BUILD: '1', GANTRY_RUNNER_PORT: '70000' };

    const result = await runIn(root, 'start.sh', env);

    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain('GANTRY_RUNNER_PORT must be a port number (1 – 65535)');
    expect(appsRunningIn(root)).toEqual([]);
  });
  it('never prints the password of the database URL', async () => {
    const root = path.join(stateDir, 'checkout');
    const env = {
      ...(await standInCheckout(root)),
      GANTRY_STATE_DIR: path.join(root, '.gantry'),
      GANTRY_SKIP_BUILD: '1',
      GANTRY_DATABASE_URL: 'postgres://postgres:s3cret-pw@127.0.0.1:5432/gantry',
    };
    try {
      const result = await runIn(root, 'start.sh', env);

      expect(result.code).toBe(0);
      expect(result.stdout).toContain('PostgreSQL  postgres://postgres:***@127.0.0.1:5432/gantry');
      expect(result.stdout + result.stderr).not.toContain('s3cret-pw');
      expect((await runIn(root, 'stop.sh', env)).code).toBe(0);
    } finally {
      for (const pid of appsRunningIn(root)) process.kill(pid, 'SIGKILL');
    }
  });
});

describe('demo-job.sh', () => {
  it('says the job service does not answer where it looks, and which variable moves it, rather than a bare curl error', async () => {
    const github = (await import('node:http')).createServer((_, res) => res.end(JSON.stringify({ clone_url: 'http://127.0.0.1:1/gantry/demo.git' })));
    await new Promise<void>((resolve) => github.listen(0, '127.0.0.1', resolve));
    const silent = await freePort();
    try {
      const result = await runIn(repoRoot, 'demo-job.sh', {
        GANTRY_GITHUB_FAKE_PORT: String((github.address() as net.AddressInfo).port),
        GANTRY_JOB_SERVICE_PORT: String(silent),
      });

      expect(result.code).not.toBe(0);
      expect(result.stderr).toContain(`the job-service does not answer on http://127.0.0.1:${silent}`);
      expect(result.stderr).toContain('GANTRY_JOB_SERVICE_PORT');
    } finally {
      github.close();
    }
  });
});

describe('demo-job.sh on a job that ends FAILED', () => {
  /** Stand-ins of the local GitHub and the two services, answering as they do for `npm run demo -- nothing`. */
  async function standIns(job: Record<string, unknown>) {
    const http = await import('node:http');
    const listen = async (answer: (path: string) => unknown) => {
      const server = http.createServer((req, res) => {
        req.resume();
        req.on('end', () => res.end(JSON.stringify(answer(req.url ?? ''))));
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      return { server, port: (server.address() as net.AddressInfo).port };
    };
    const github = await listen(() => ({ clone_url: 'http://127.0.0.1:1/gantry/demo.git' }));
    const jobService = await listen((url) =>
      url.endsWith('/register_product') ? { ok: true, result: {} } : url.endsWith('/enqueue_job') ? { ok: true, result: { jobId: job.jobId } } : url.endsWith('/get_job') ? { ok: true, result: job } : { status: 'ok' },
    );
    const prService = await listen(() => ({ status: 'ok' }));
    return {
      env: { GANTRY_GITHUB_FAKE_PORT: String(github.port), GANTRY_JOB_SERVICE_PORT: String(jobService.port), GANTRY_PR_SERVICE_PORT: String(prService.port) },
      close: () => [github, jobService, prService].forEach(({ server }) => server.close()),
    };
  }

  it('says plainly that its task stays IN_PROGRESS by design, and how the task is taken up again', async () => {
    const servers = await standIns({ jobId: 'job-demo-1', status: 'FAILED', taskStatus: 'IN_PROGRESS', error: 'verify produced no output' });
    try {
      const result = await runIn(repoRoot, 'demo-job.sh', servers.env, ['nothing']);

      expect(result.code).toBe(0);
      expect(result.stdout).toContain('the job ended FAILED: verify produced no output; nothing to merge');
      expect(result.stdout).toContain('its task stays IN_PROGRESS, by design');
      expect(result.stdout).toContain('a new job for the task');
    } finally {
      servers.close();
    }
  });
});

describe('stop.sh', () => {
  /**
   * A stand-in app whose command line names the app's entry point, as the real one's does: it runs
   * `handler` (installing its signal handlers), then says so. Started when it has said so — a signal
   * sent before its handler is installed would kill it on a slow machine.
   */
  async function standInApp(handler: string, entryPoint: string): Promise<ChildProcess> {
    const app = spawn(process.execPath, ['-e', `${handler} setInterval(() => {}, 1000); process.stdout.write('ready\\n');`, entryPoint], { stdio: ['ignore', 'pipe', 'ignore'] });
    children.push(app);
    await new Promise<void>((resolve, reject) => {
      app.stdout!.once('data', () => resolve());
      app.once('exit', (code) => reject(new Error(`the stand-in app exited (${code}) before it was ready`)));
    });
    return app;
  }

  it('sends SIGTERM to a running app and waits until it has exited', async () => {
    const marker = path.join(stateDir, 'signal');
    const app = await standInApp(`process.on('SIGTERM', () => { require('node:fs').writeFileSync(${JSON.stringify(marker)}, 'SIGTERM'); setTimeout(() => process.exit(0), 300); });`, 'apps/job-service/dist/main.js');
    mkdirSync(path.join(stateDir, 'pids'));
    writeFileSync(path.join(stateDir, 'pids/job-service.pid'), String(app.pid));

    const result = await runScript('stop.sh', { GANTRY_STATE_DIR: stateDir });

    expect(result.code).toBe(0);
    expect(result.stdout).toContain(`[gantry] stopping job-service (pid ${app.pid}, SIGTERM)`);
    expect(result.stdout).toContain('[gantry] job-service stopped');
    expect(readFileSync(marker, 'utf8')).toBe('SIGTERM');
    expect(isAlive(app.pid!)).toBe(false);
    expect(existsSync(path.join(stateDir, 'pids/job-service.pid'))).toBe(false);
  });

  it("waits for an app's whole stop within its shutdown grace (a runner stopping its agents) before any SIGKILL", async () => {
    const marker = path.join(stateDir, 'exit');
    // A runner that takes 21 s to stop after SIGTERM (its 15 s for running jobs, the agents' kill grace): within its 30 s grace.
    const app = await standInApp(`process.on('SIGTERM', () => setTimeout(() => { require('node:fs').writeFileSync(${JSON.stringify(marker)}, 'stopped'); process.exit(0); }, 21000));`, 'apps/runner/dist/main.js');
    mkdirSync(path.join(stateDir, 'pids'));
    writeFileSync(path.join(stateDir, 'pids/runner.pid'), String(app.pid));

    const result = await runScript('stop.sh', { GANTRY_STATE_DIR: stateDir });

    expect(result.code).toBe(0);
    expect(result.stdout).not.toContain('sending SIGKILL');
    expect(readFileSync(marker, 'utf8')).toBe('stopped');
  }, 60_000);

  it('leaves alone a process whose pid is in a pid file but which is not the app', async () => {
    const other = spawn('sleep', ['30'], { stdio: 'ignore' });
    children.push(other);
    mkdirSync(path.join(stateDir, 'pids'));
    writeFileSync(path.join(stateDir, 'pids/runner.pid'), String(other.pid));

    const result = await runScript('stop.sh', { GANTRY_STATE_DIR: stateDir });

    expect(result.code).toBe(0);
    expect(result.stderr).toContain('[gantry] runner is not running');
    expect(isAlive(other.pid!)).toBe(true);
    expect(existsSync(path.join(stateDir, 'pids/runner.pid'))).toBe(false);
  });

  it('--infra leaves alone a nats-server it did not start whose pid is in its pid file', async () => {
    const port = await freePort();
    const nats = spawn('nats-server', ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', path.join(stateDir, 'elsewhere')], { stdio: 'ignore' });
    children.push(nats);
    await waitUntil(() => accepts(port), `nats-server on ${port}`);
    mkdirSync(path.join(stateDir, 'pids'));
    writeFileSync(path.join(stateDir, 'pids/nats-server.pid'), String(nats.pid));

    const result = await runScript('stop.sh', { GANTRY_STATE_DIR: stateDir }, ['--infra']);

    expect(result.code).toBe(0);
    expect(result.stdout).not.toContain('stopping nats-server');
    expect(isAlive(nats.pid!)).toBe(true);
    expect(await accepts(port)).toBe(true);
  });

  it('refuses an argument it does not know', async () => {
    const result = await runScript('stop.sh', { GANTRY_STATE_DIR: stateDir }, ['--everything']);

    expect(result.code).toBe(1);
    expect(result.stderr).toContain("[gantry] ERROR: unknown argument '--everything' (usage: scripts/stop.sh [--infra])");
  });
});
