import { vulnerabilityCheck, type VulnerabilityCategory } from '@simple-git/argv-parser';
import { ErrorCode } from '@gantry/contracts';
import { GitCommandError } from './git-command-error.js';

/*
 * simple-git's guard against unsafe operations (its `unsafe` options), and the one place this policy
 * departs from its defaults. See docs/git.md, "simple-git's guard".
 *
 * The guard refuses a config key or an environment variable that names a program by its name, whatever
 * the value: `-c core.hooksPath=/dev/null` is refused like `-c core.hooksPath=/tmp/agent`. The policy's
 * own overrides set exactly such keys — to values that switch the program off — and its environment
 * names GIT_CONFIG_GLOBAL=/dev/null, and neither can reach git any other way with the precedence they
 * need (only the command line and GIT_CONFIG_COUNT, which the guard refuses as well, beat the
 * repository's config). So:
 *  - the caller's arguments, the only part of a command not written in this library, go through the
 *    guard with every protection on (`assertNoUnsafeOperation`) before anything runs;
 *  - the simple-git instance that runs git opts in to the categories of the policy's own settings
 *    (`POLICY_OPT_INS`), and to nothing else.
 */

/** The categories the policy's own settings fall in: simple-git cannot tell them from hostile ones. */
export const POLICY_OPT_INS = {
  // core.hooksPath=/dev/null: no hooks from the repository's hooks directory (overrides.ts).
  allowUnsafeHooksPath: true,
  // core.fsmonitor=false
  allowUnsafeFsMonitor: true,
  // core.sshCommand=ssh: the repository's own sshCommand is not used.
  allowUnsafeSshCommand: true,
  // core.askPass= (empty: no prompt program)
  allowUnsafeAskPass: true,
  // credential.helper= (empty: the list is reset), then the operator's GANTRY_GIT_CREDENTIAL_HELPER.
  allowUnsafeCredentialHelper: true,
  // GIT_CONFIG_GLOBAL=/dev/null: no global config (environment.ts).
  allowUnsafeConfigPaths: true,
} as const satisfies Partial<Record<VulnerabilityCategory, true>>;

/** What simple-git's guard, with nothing opted in, finds in these arguments. */
export function unsafeOperations(args: readonly string[]): VulnerabilityCategory[] {
  return [...new Set(vulnerabilityCheck(args, {}).map((found) => found.category))];
}

/**
 * Refuses (INVALID_COMMAND, nothing run) arguments that simple-git's guard refuses at its defaults:
 * `--upload-pack` / `--receive-pack`, `push --exec`, `--template`, a config write of a key that names
 * a program (`clone -c core.fsmonitor=…`, `config filter.x.clean …`) and the rest of its list.
 */
export function assertNoUnsafeOperation(args: readonly string[]): void {
  const found = vulnerabilityCheck(args, {});
  if (found.length === 0) return;
  throw new GitCommandError(
    `git ${args[0]} refused before it ran: ${found.map((f) => f.message).join('; ')}`,
    { args: [...args], exitCode: null, stderr: '', unsafe: [...new Set(found.map((f) => f.category))] },
    ErrorCode.INVALID_COMMAND,
  );
}
