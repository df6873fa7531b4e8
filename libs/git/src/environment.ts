/*
 * The environment of every git process Gantry starts. The service's own environment minus every
 * variable git reads as an instruction (GIT_DIR, GIT_CONFIG_*, GIT_SSH_COMMAND, GIT_EXTERNAL_DIFF,
 * EDITOR, PAGER, …), plus the policy of docs/git.md: no system or global config, no terminal
 * prompts, only the file, https and ssh transports, no replace objects.
 */

/** The transports service-side git may use: never `ext::` or `fd::` (they run commands), nor git:// (core.gitProxy). */
export const ALLOWED_PROTOCOLS = 'file:https:ssh';

/** Variables outside GIT_* that git (or ssh) reads as a program to run. */
const PROGRAM_VARIABLES = new Set(['EDITOR', 'VISUAL', 'PAGER', 'PREFIX', 'SSH_ASKPASS']);

/** What the policy sets itself; every other GIT_* variable is dropped. */
const POLICY: Readonly<Record<string, string>> = {
  GIT_CONFIG_NOSYSTEM: '1',
  GIT_CONFIG_GLOBAL: '/dev/null',
  GIT_TERMINAL_PROMPT: '0',
  GIT_ALLOW_PROTOCOL: ALLOWED_PROTOCOLS,
  // A repository's refs/replace/* would make git read other objects than the commits it names.
  GIT_NO_REPLACE_OBJECTS: '1',
  LC_ALL: 'C',
};

export interface CommitIdentity {
  name: string;
  email: string;
}

export function gitEnvironment(identity?: CommitIdentity): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (value === undefined) continue;
    const upper = name.toUpperCase();
    if (upper.startsWith('GIT_') || PROGRAM_VARIABLES.has(upper)) continue;
    env[name] = value;
  }
  Object.assign(env, POLICY);
  if (identity) {
    env.GIT_AUTHOR_NAME = env.GIT_COMMITTER_NAME = identity.name;
    env.GIT_AUTHOR_EMAIL = env.GIT_COMMITTER_EMAIL = identity.email;
  }
  return env;
}
