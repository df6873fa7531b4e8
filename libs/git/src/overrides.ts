/*
 * Settings given with `-c` on every git call. Config given on the command line beats the
 * repository's own, so whatever an agent wrote for these keys, git runs no program of its choosing
 * for them. Keys whose name the repository chooses — filter.<driver>.*, diff.<driver>.*,
 * merge.<driver>.*, url.<base>.insteadOf, remote.<name>.* — cannot be overridden that way, nor can
 * remote.<name>.uploadpack / receivepack (git keeps the first value it reads, the repository's);
 * the config check (repository-config.ts) refuses a repository that has them.
 * See docs/git.md.
 */

/** The credential helper service-side git uses for https origins (git's global config is not read). */
export const CREDENTIAL_HELPER_VARIABLE = 'GANTRY_GIT_CREDENTIAL_HELPER';

export function commandLineOverrides(): string[] {
  // Read at each call, like the rest of the environment git gets; the operator's setting, never the repository's.
  const helper = process.env[CREDENTIAL_HELPER_VARIABLE]?.trim();
  return [
    'core.hooksPath=/dev/null',
    'core.fsmonitor=false',
    'core.sshCommand=ssh',
    'core.askPass=',
    'core.alternateRefsCommand=',
    // An empty value empties the list of helpers (including url-scoped ones) read so far.
    'credential.helper=',
    ...(helper ? [`credential.helper=${helper}`] : []),
    'commit.gpgSign=false',
  ];
}
