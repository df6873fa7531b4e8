/**
 * Test-only: `GANTRY_TEST_CRASH_AFTER_COMMIT=<command>` makes the process die with SIGKILL right
 * after that command committed and before it replies — the "reply lost" case (docs/architecture.md, "Idempotency receipts"). Unset in
 * every real deployment; nothing else reads it.
 */
export function crashAfterCommitIfAsked(command: string): void {
  if (process.env.GANTRY_TEST_CRASH_AFTER_COMMIT === command) process.kill(process.pid, 'SIGKILL');
}

let stopped = false;

/**
 * Test-only: `GANTRY_TEST_STOP_BEFORE_COMMIT=<command>` makes the process stop itself (SIGSTOP) once,
 * after that command was decided and before its write is sent — a replica frozen mid-command (a
 * long GC pause, a suspended VM) while its caller sends the command again to another
 * (docs/architecture.md, "Idempotency receipts"). Unset in every real deployment.
 */
export function stopBeforeCommitIfAsked(command: string): void {
  if (stopped || process.env.GANTRY_TEST_STOP_BEFORE_COMMIT !== command) return;
  stopped = true;
  process.kill(process.pid, 'SIGSTOP');
}
