/**
 * Test-only: `GANTRY_TEST_CRASH_AFTER_COMMIT=<command>` makes the process die with SIGKILL right
 * after that command committed and before it replies — the "reply lost" case (docs/architecture.md, "Idempotency receipts"). Unset in
 * every real deployment; nothing else reads it.
 */
export function crashAfterCommitIfAsked(command: string): void {
  if (process.env.GANTRY_TEST_CRASH_AFTER_COMMIT === command) process.kill(process.pid, 'SIGKILL');
}
