/**
 * Test-only: `GANTRY_TEST_CRASH_AT=<point>` makes the process die with SIGKILL when it reaches that
 * point — e.g. right after an external system did what was asked and before the service recorded
 * it, the crash a restart must recover from. Unset in every real deployment; nothing else reads it.
 */
export function crashHereIfAsked(point: string): void {
  if (process.env.GANTRY_TEST_CRASH_AT === point) process.kill(process.pid, 'SIGKILL');
}
