import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { instructionsOf, parseDockerfile, readInstructions } from './dockerfile.js';
import { checkAppDockerfile } from './dockerfile-checks.js';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const repoDockerfile = readFileSync(path.join(repoRoot, 'Dockerfile'), 'utf8');

describe('reading a Dockerfile', () => {
  it('joins continuation lines and skips comment lines inside them', () => {
    const instructions = readInstructions(['FROM node:20-slim', 'RUN apt-get update \\', '  # why: git', ' && apt-get install -y git'].join('\n'));

    expect(instructions).toEqual([
      { keyword: 'FROM', args: 'node:20-slim', line: 1 },
      { keyword: 'RUN', args: 'apt-get update && apt-get install -y git', line: 2 },
    ]);
  });

  it('keeps ARGs before the first FROM as global arguments and names stages after AS', () => {
    const file = parseDockerfile('ARG BASE=node:20-slim\nFROM --platform=linux/amd64 ${BASE} AS build\nRUN true\nfrom build\nuser node\n');

    expect(file.globalArgs.map((arg) => arg.args)).toEqual(['BASE=node:20-slim']);
    expect(file.stages.map(({ base, name }) => ({ base, name }))).toEqual([
      { base: '${BASE}', name: 'build' },
      { base: 'build', name: undefined },
    ]);
    expect(instructionsOf(file.stages[1]!, 'USER')).toEqual([{ keyword: 'USER', args: 'node', line: 5 }]);
  });

  it('refuses an unknown instruction and says on which line', () => {
    expect(() => parseDockerfile('FROM node:20-slim\n\nRUNN npm ci\n')).toThrow('Dockerfile line 3: unknown instruction "RUNN"');
  });

  it('refuses an instruction other than ARG before the first FROM', () => {
    expect(() => parseDockerfile('RUN npm ci\nFROM node:20-slim\n')).toThrow('Dockerfile line 1: RUN before the first FROM');
  });

  it('refuses a file without FROM and a malformed FROM', () => {
    expect(() => parseDockerfile('# nothing\nARG APP\n')).toThrow('Dockerfile has no FROM instruction');
    expect(() => parseDockerfile('FROM node:20-slim AS\n')).toThrow('Dockerfile line 1: expected "FROM <image> [AS <name>]"');
  });
});

describe("the repository's app Dockerfile", () => {
  const file = parseDockerfile(repoDockerfile);
  const runtime = file.stages.at(-1)!;

  it('builds on node:20-slim in a build stage and a runtime stage', () => {
    expect(file.stages.map(({ base, name }) => ({ base, name }))).toEqual([
      { base: 'node:20-slim', name: 'build' },
      { base: 'node:20-slim', name: 'runtime' },
    ]);
    expect(instructionsOf(file.stages[0]!, 'RUN').map((run) => run.args)).toContain('npm ci --no-audit --no-fund');
  });

  it('runs the app named by APP as the unprivileged node user', () => {
    expect(instructionsOf(runtime, 'USER').map((user) => user.args)).toEqual(['node']);
    expect(instructionsOf(runtime, 'CMD').map((cmd) => cmd.args)).toEqual(['exec node apps/${APP}/dist/main.js']);
    expect(instructionsOf(runtime, 'COPY').map((copy) => copy.args)).toContain('--from=build /repo/apps/${APP} ./apps/${APP}');
  });

  it("keeps the code cache in a directory the node user owns, the app's code staying root's", () => {
    const env = instructionsOf(runtime, 'ENV').map((e) => e.args).join(' ');
    const dir = /GANTRY_CODE_CACHE_DIR=(\S+)/.exec(env)?.[1];
    expect(dir).toBe('/var/lib/gantry/code-cache');
    const runs = instructionsOf(runtime, 'RUN').map((run) => run.args);
    expect(runs.some((run) => run.includes(`mkdir -p`) && new RegExp(`chown node:node [^&]*${dir}`).test(run))).toBe(true);
    expect(runs.some((run) => /chown[^&]*\/app\b/.test(run))).toBe(false);
  });

  it('passes every check of an app image', () => {
    expect(checkAppDockerfile(file)).toEqual([]);
  });
});

describe('checking an app Dockerfile', () => {
  const variant = (replace: (text: string) => string) => checkAppDockerfile(parseDockerfile(replace(repoDockerfile)));

  it('reports a final stage without USER as running as root', () => {
    expect(variant((text) => text.replace(/^USER node$/m, ''))).toEqual([
      'the final stage "runtime" has no USER, so the app would run as root',
    ]);
  });

  it('reports USER root in the final stage', () => {
    expect(variant((text) => text.replace(/^USER node$/m, 'USER root:root'))).toEqual([
      expect.stringMatching(/^line \d+: the final stage "runtime" runs as root \(USER root:root\)$/),
    ]);
  });

  it('reports a CMD that does not start the app entry point', () => {
    expect(variant((text) => text.replace(/^CMD .*$/m, 'CMD ["node", "main.js"]'))).toEqual([
      expect.stringMatching(/CMD does not run apps\/\$\{APP\}\/dist\/main\.js \(it runs: \["node", "main\.js"\]\)$/),
    ]);
  });

  it('reports an APP that is only a build argument and gone at run time', () => {
    expect(variant((text) => text.replace(/^ {4}APP=\$\{APP\} \\\n/m, ''))).toEqual([
      'the final stage "runtime" does not keep APP in its environment (ENV APP=${APP}), so CMD cannot find the app',
    ]);
  });

  it('reports a single-stage build, a missing health check and a COPY from an unknown stage', () => {
    const problems = checkAppDockerfile(
      parseDockerfile('FROM node:20-slim\nARG APP\nENV APP=${APP}\nCOPY --from=builder /repo /app\nUSER node\nEXPOSE 3101\nCMD exec node apps/${APP}/dist/main.js\n'),
    );

    expect(problems).toEqual([
      'the Dockerfile has one stage; build and runtime must be separate stages',
      'line 4: COPY --from=builder names no earlier stage',
      'the final stage has no HEALTHCHECK on /health',
    ]);
  });
});
