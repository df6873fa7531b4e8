/**
 * Test-only: `GANTRY_TEST_CRASH_AT=<point>` makes the process die with SIGKILL when it reaches that
 * point — e.g. right after an external system did what was asked and before the service recorded
 * it, the crash a restart must recover from. Unset in every real deployment; nothing else reads it.
 */
export function crashHereIfAsked(point: string): void {
  if (process.env.GANTRY_TEST_CRASH_AT === point) process.kill(process.pid, 'SIGKILL');
}

const held = new Set<string>();

/**
 * Test-only: `GANTRY_TEST_HOLD_AT=<point>` makes the process wait at that point, the first time it
 * gets there, until it is sent SIGUSR2 — so a test can change the world exactly between two steps
 * (e.g. move a branch between the merge decision and the merge). It says where it waits on stderr.
 * Unset in every real deployment; nothing else reads it.
 */
export async function holdHereIfAsked(point: string): Promise<void> {
  if (process.env.GANTRY_TEST_HOLD_AT !== point || held.has(point)) return;
  held.add(point);
  const released = new Promise<void>((resolve) => process.once('SIGUSR2', () => resolve()));
  process.stderr.write(`${JSON.stringify({ testHold: point, pid: process.pid })}\n`);
  await released;
}

const failed = new Set<string>();

/**
 * Test-only: `GANTRY_TEST_FAIL_AT=<point>` makes the step at that point fail (throw), the first time the process gets
 * there, with the process and its connections alive — the failure of one query whose connection is still usable (a
 * client-side timeout, a statement cancelled), which the code must not take for a connection in a known state. Unset
 * in every real deployment; nothing else reads it.
 */
export function failHereIfAsked(point: string): void {
  if (process.env.GANTRY_TEST_FAIL_AT !== point || failed.has(point)) return;
  failed.add(point);
  throw new Error(`test fault at ${point}`);
}
