/**
 * Test-only: `GANTRY_TEST_KILL_AFTER_GIT=<effect type>` makes the process die with SIGKILL after the
 * git work of that effect and before its outcome is reported — the crash between "effect requested"
 * and "effect reported". Unset in every real deployment; nothing else reads it.
 */
export function killAfterGitIfAsked(effectType: string): void {
  if (process.env.GANTRY_TEST_KILL_AFTER_GIT === effectType) process.kill(process.pid, 'SIGKILL');
}
