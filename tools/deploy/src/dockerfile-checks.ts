import { instructionsOf, type Dockerfile } from './dockerfile.js';

/** The entry point every app image must run (the APP build argument picks the app). */
export const APP_ENTRY_POINT = 'apps/${APP}/dist/main.js';

const ROOT_USERS = new Set(['root', '0']);

/**
 * What is wrong with the parameterised app Dockerfile, as sentences; empty when nothing is.
 * The image must build in stages, run as a non-root user, start the app named by APP and
 * declare a health check on /health.
 */
export function checkAppDockerfile(dockerfile: Dockerfile): string[] {
  const problems: string[] = [];
  const { stages } = dockerfile;
  const final = stages[stages.length - 1]!;
  const finalLabel = final.name ? `the final stage "${final.name}"` : 'the final stage';

  if (stages.length < 2) problems.push('the Dockerfile has one stage; build and runtime must be separate stages');

  stages.forEach((stage, index) => {
    const earlier = new Set(stages.slice(0, index).flatMap((s, i) => [String(i), ...(s.name ? [s.name] : [])]));
    for (const copy of instructionsOf(stage, 'COPY')) {
      const from = /--from=(\S+)/.exec(copy.args)?.[1];
      if (from !== undefined && !earlier.has(from) && !from.includes(':')) {
        problems.push(`line ${copy.line}: COPY --from=${from} names no earlier stage`);
      }
    }
  });

  const user = instructionsOf(final, 'USER').at(-1);
  const userName = user?.args.split(':')[0]?.trim() ?? '';
  if (!user) problems.push(`${finalLabel} has no USER, so the app would run as root`);
  else if (ROOT_USERS.has(userName)) problems.push(`line ${user.line}: ${finalLabel} runs as root (USER ${user.args})`);

  const cmd = instructionsOf(final, 'CMD').at(-1);
  if (!cmd) problems.push(`${finalLabel} has no CMD`);
  else if (!cmd.args.includes(APP_ENTRY_POINT)) {
    problems.push(`line ${cmd.line}: CMD does not run ${APP_ENTRY_POINT} (it runs: ${cmd.args})`);
  }

  // A build argument is gone at run time: CMD can only expand ${APP} if an ENV keeps it.
  if (!instructionsOf(final, 'ARG').some((arg) => /^APP(=|$)/.test(arg.args))) {
    problems.push(`${finalLabel} does not declare ARG APP`);
  }
  if (!instructionsOf(final, 'ENV').some((env) => /(^|\s)APP=/.test(env.args))) {
    problems.push(`${finalLabel} does not keep APP in its environment (ENV APP=\${APP}), so CMD cannot find the app`);
  }

  const healthcheck = instructionsOf(final, 'HEALTHCHECK').at(-1);
  if (!healthcheck || !healthcheck.args.includes('/health')) {
    problems.push(`${finalLabel} has no HEALTHCHECK on /health`);
  }
  if (instructionsOf(final, 'EXPOSE').length === 0) problems.push(`${finalLabel} exposes no port`);

  return problems;
}
