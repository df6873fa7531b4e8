import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ErrorCode, GantryError } from '@gantry/contracts';

/*
 * Test-only fault points of the dispatcher, the placement and the startup scan, read from the
 * environment; unset in every real deployment, and nothing else reads these variables. Each lets a
 * process test reach a state the acceptance asks for by cause, not by timing:
 *   GANTRY_TEST_WORKFLOW_KILL_AT=<point>[,<point>]   SIGKILL this process at the point
 *   GANTRY_TEST_WORKFLOW_HOLD_AT=<point>             wait at the point until <dir>/<point>.release exists;
 *   GANTRY_TEST_WORKFLOW_HOLD_DIR=<dir>              <dir>/<point>.reached is written when it is reached
 *   GANTRY_TEST_WORKFLOW_FAIL=<what>[,<what>]        make an action / allocation / scan record fail
 * Points: `claimed:<position>` (a claim committed, before the action), `clearing:<position>` (the
 * clear appended, its transaction not committed), `run:<position>:<n>` (the n-th run of a fan-out
 * queued), `enqueued:<position>` (the job service answered a run's enqueue, its job not yet
 * recorded), `effect:<position>` (an action done, its marker not written), `finished:<position>` (the
 * position's terminal marker committed), `quorum` (a decision recorded or a seat removed and the
 * step's guards evaluated, its transaction open, the move they call for not yet made),
 * `placing:<stepId>` (a move of the task to that step has read the task, its transaction open,
 * scoped by the occupancy it read). A point may be scoped to one entry:
 * `<taskId>@<stepId>#<entrySeq>/<point>`.
 * Failures: `action:<type>`, `allocation:<stepId>`, `recovery:<taskId>`, `recovery-query`,
 * `job-enqueued:<taskId>` (the handler of a JobEnqueued of that task's jobs). Answers of a busy
 * stream (VERSION_CONFLICT, nothing written, as a command whose stream stayed busy past its patience
 * is answered): `enqueue-conflict:<taskId>` (the job service's answer to the first try of each
 * enqueue of that task's runs, in place of sending it), `seat-conflict:<taskId>` (every append of
 * an ensure_participant_seat of that task), `seat-conflict-once:<taskId>` (the first such append
 * only), `session-conflict:<taskId>` (the first try of each
 * session-owned action's append of that task, per firing event and position),
 * `promotion-conflict:<taskId>` (the first promotion of that task into a freed seat). A database out
 * of reach: `database-lost-once:<taskId>` (the first on_enter marker append of that task is made on a
 * connection PostgreSQL ends — the session terminates itself — and fails as a lost connection does),
 * `session-database-lost-once:<taskId>` (the same for the first session-owned action of that task,
 * of any trigger, before it writes anything), `exit-database-lost-once:<taskId>` (the same for the
 * first append that finishes an exit of that task), `left-check-database-lost-once:<taskId>` (the
 * same for the first read of whether that task has left the entry a session action is sent again for),
 * `recovery-database-lost-once:<taskId>` (the same for the first read of an entry of that task by a
 * recovery scan or a scan of the stopped entries), `recovery-query-database-lost-once:<reason>` (the
 * same for the query of the open entries of the recovery scan of that reason, `startup` at start, in
 * place of a task id), `session-start-database-lost-once:<taskId>` (the
 * same for the first write of that task's session start, at a job's JobStarted),
 * `turn-move-database-lost-once:<taskId>` (the same for the first move a turn of that task makes).
 * A write whose answer is lost after its commit: `session-committed-database-lost-once:<taskId>` (the
 * first session-owned action of that task commits its write, and then a connection is ended as above
 * and its error thrown, as when the connection is lost before the commit's answer arrives),
 * `turn-move-committed-database-lost-once:<taskId>` (the same for the first move of that task a turn
 * makes: committed, then the error thrown before the work after its commit).
 * Where an event goes: `turn-redelivered-elsewhere:<taskId>` (a job's event whose turn's move of that
 * task lost its answer in this process is handed back each time it comes to this process again, so that
 * another replica of the shared durable consumer handles it).
 */

/** The faults that end a connection of the engine's once for a task (`<fault>:<taskId>`). */
export type LostConnectionFault =
  | 'database-lost-once'
  | 'session-database-lost-once'
  | 'session-committed-database-lost-once'
  | 'exit-database-lost-once'
  | 'left-check-database-lost-once'
  | 'recovery-database-lost-once'
  | 'recovery-query-database-lost-once'
  | 'session-start-database-lost-once'
  | 'turn-move-database-lost-once'
  | 'turn-move-committed-database-lost-once';

const list = (name: string) => (process.env[name] ?? '').split(',').map((s) => s.trim()).filter(Boolean);

export class TestHooks {
  private readonly killAt = new Set(list('GANTRY_TEST_WORKFLOW_KILL_AT'));
  private readonly holdAt = new Set(list('GANTRY_TEST_WORKFLOW_HOLD_AT'));
  private readonly holdDir = process.env.GANTRY_TEST_WORKFLOW_HOLD_DIR ?? '';
  private readonly failures = new Set(list('GANTRY_TEST_WORKFLOW_FAIL'));

  get active(): boolean {
    return this.killAt.size + this.holdAt.size + this.failures.size > 0;
  }

  /** Dies here if asked to; waits here if asked to. `scope` names the entry (`<taskId>@<stepId>#<entrySeq>`). */
  async reached(point: string, scope?: string): Promise<void> {
    const names = scope ? [point, `${scope}/${point}`] : [point];
    if (names.some((n) => this.killAt.has(n))) process.kill(process.pid, 'SIGKILL');
    const held = names.find((n) => this.holdAt.has(n));
    if (!held || this.holdDir === '') return;
    const file = held.replace(/\//g, '__');
    writeFileSync(join(this.holdDir, `${file}.reached`), String(process.pid));
    while (!existsSync(join(this.holdDir, `${file}.release`))) await new Promise((r) => setTimeout(r, 20));
  }

  fails(what: string): boolean {
    return this.failures.has(what);
  }

  /** A stream kept busy past its patience: the answer a command then gets (nothing written). */
  busy(what: string): GantryError {
    return new GantryError(ErrorCode.VERSION_CONFLICT, `${what}: the stream stayed busy (forced by a test), nothing written; the same request may be sent again`, { written: false });
  }

  /** `enqueue-conflict:<taskId>`: the first try of each enqueue of the task's runs is answered VERSION_CONFLICT. */
  enqueueAnswer(request: { taskId?: string | null | undefined; idempotencyKey: string }): GantryError | null {
    if (!request.taskId || !this.failures.has(`enqueue-conflict:${request.taskId}`) || this.conflicted.has(request.idempotencyKey)) return null;
    this.conflicted.add(request.idempotencyKey);
    return this.busy(`enqueue ${request.idempotencyKey}`);
  }

  /** `session-conflict:<taskId>`: the first try of each session action's append (one per `key`) is answered VERSION_CONFLICT. */
  sessionAnswer(taskId: string, key: string): GantryError | null {
    if (!this.failures.has(`session-conflict:${taskId}`) || this.conflicted.has(`session:${key}`)) return null;
    this.conflicted.add(`session:${key}`);
    return this.busy(`session action ${key} of task ${taskId}`);
  }

  /** `seat-conflict:<taskId>` every append of the task's ensure_participant_seat, `seat-conflict-once:<taskId>` the first, is answered VERSION_CONFLICT. */
  seatAnswer(taskId: string): GantryError | null {
    const once = this.failures.has(`seat-conflict-once:${taskId}`) && !this.conflicted.has(`seat:${taskId}`);
    if (!once && !this.failures.has(`seat-conflict:${taskId}`)) return null;
    this.conflicted.add(`seat:${taskId}`);
    return this.busy(`ensure_participant_seat of task ${taskId}`);
  }

  /** `promotion-conflict:<taskId>`: the first promotion of the task into a freed seat is answered VERSION_CONFLICT. */
  promotionAnswer(taskId: string): GantryError | null {
    if (!this.failures.has(`promotion-conflict:${taskId}`) || this.conflicted.has(`promotion:${taskId}`)) return null;
    this.conflicted.add(`promotion:${taskId}`);
    return this.busy(`the promotion of task ${taskId}`);
  }

  /**
   * `<fault>:<taskId>` (LostConnectionFault; `taskId` names what the fault is scoped to):
   * the first time, a connection of `pool` is ended by the server (pg_terminate_backend of its own
   * session) and its error thrown, as a write made on it gets it.
   */
  async loseConnectionOnce(fault: LostConnectionFault, taskId: string, pool: { connect(): Promise<{ query(text: string): Promise<unknown>; release(destroy?: boolean): void }> }): Promise<void> {
    const key = `${fault}:${taskId}`;
    if (!this.failures.has(key) || this.conflicted.has(key)) return;
    this.conflicted.add(key);
    const client = await pool.connect();
    try {
      await client.query('SELECT pg_terminate_backend(pg_backend_pid())');
    } finally {
      client.release(true);
    }
    throw new Error('the connection outlived its own termination (a test fault that did not take)');
  }

  /**
   * `turn-redelivered-elsewhere:<taskId>`: `lost` notes a job's event whose turn's move of the task lost
   * its answer here; whether that event, delivered here again, is to be handed back for another replica.
   */
  sentElsewhere(taskId: string, eventId: string, lost = false): boolean {
    if (!this.failures.has(`turn-redelivered-elsewhere:${taskId}`)) return false;
    if (lost) this.conflicted.add(`elsewhere:${eventId}`);
    return this.conflicted.has(`elsewhere:${eventId}`);
  }

  private readonly conflicted = new Set<string>();
}
