import { ErrorCode, GantryError } from '@gantry/contracts';

/**
 * How long a command keeps deciding again after its append met another writer's
 * (docs/architecture.md, "The event log in PostgreSQL", "When a stream stays busy").
 */
export interface ConflictPatience {
  /** How long after its first try a command may still start another; then it is answered VERSION_CONFLICT. */
  patienceMs: number;
  /** The longest pause between two tries; the pauses double up to it from 2 ms, each a random part of its ceiling. */
  maxPauseMs: number;
}

/**
 * Well under a caller's timeout of one try (CommandClient's 10 s, the workflow engine's
 * GANTRY_WORKFLOW_COMMAND_TIMEOUT_MS), so a command that cannot be done is answered rather than lost.
 */
export const DEFAULT_CONFLICT_PATIENCE: ConflictPatience = { patienceMs: 5_000, maxPauseMs: 100 };

/**
 * Turns on busy streams for this process's commands that met a conflict there: after its first
 * conflict on a stream, a command tries again only in its turn, one at a time and in the order they
 * came, until it is done. A first try takes no turn (the path of almost every command is unchanged),
 * and a command waits for a turn only between tries, holding no transaction and no connection: the
 * holder can never wait for a waiter. Without turns, the process's own writers of one stream (the
 * dispatches of several entries marking the same (task, step) stream) kept taking versions from
 * under each other until some ran out of patience. (First tries lined up too while a turn was held
 * were tried: the process's writers of a busy stream then went one at a time, unbatched, and 30
 * dispatches of one stream had not finished after 3 minutes.)
 */
export class StreamTurns {
  private readonly lines = new Map<string, Array<() => void>>();

  /** Resolves with the turn's release once it is this caller's, or null when `timeoutMs` passed first (no turn taken). */
  take(streamId: string, timeoutMs: number): Promise<(() => void) | null> {
    const line = this.lines.get(streamId);
    if (!line) {
      this.lines.set(streamId, []);
      return Promise.resolve(() => this.pass(streamId));
    }
    return new Promise((resolve) => {
      const enter = () => {
        clearTimeout(timer);
        resolve(() => this.pass(streamId));
      };
      const timer = setTimeout(() => {
        line.splice(line.indexOf(enter), 1);
        resolve(null);
      }, Math.max(0, timeoutMs));
      line.push(enter);
    });
  }

  /** The holder is done: the next in line takes the turn, or the stream has no line any more. */
  private pass(streamId: string): void {
    const next = this.lines.get(streamId)!.shift();
    if (next) next();
    else this.lines.delete(streamId);
  }
}

/**
 * The tries of one command that meets concurrent appends. A writer that keeps appending to a
 * stream (a dispatch marking a hundred positions) may take a stream version from under a command
 * many times in a row: a count of tries a few milliseconds apart ran out within a fraction of a
 * second, so the command is given time instead, its pauses growing and spread at random so that
 * two writers that collided do not collide again in step.
 */
export class ConflictRetries {
  private readonly started: number;
  private tries = 1;
  /** The streams the tries met other writers on, as the conflicts named them. */
  private readonly contended = new Set<string>();
  /** The turn this command holds (StreamTurns), on the first stream it met a conflict on. */
  private release: (() => void) | null = null;

  constructor(
    private readonly patience: ConflictPatience,
    private readonly turns: StreamTurns,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.started = now();
  }

  /**
   * After a try that met a concurrent append: pauses and resolves true when another try may start,
   * false once the patience is spent (throw `exhausted()` then).
   */
  async again(error: unknown, streams: Iterable<string> = []): Promise<boolean> {
    const met = [...streams];
    const named = error instanceof GantryError ? error.details?.streamId : undefined;
    if (typeof named === 'string') met.push(named);
    for (const id of met) this.contended.add(id);
    const left = () => this.patience.patienceMs - (this.now() - this.started);
    if (left() <= 0) return false;
    if (this.release === null && met.length > 0) {
      // At most one turn a command: two commands each holding one never wait for each other.
      this.release = await this.turns.take(met.sort()[0]!, left());
      if (this.release === null) return false;
      this.tries += 1;
      return true;
    }
    const pause = Math.random() * Math.min(this.patience.maxPauseMs, 2 ** this.tries);
    if (pause >= left()) return false;
    this.tries += 1;
    await new Promise((resolve) => setTimeout(resolve, pause));
    return true;
  }

  /** The command is done (answered, refused or given up): its turn passes on. */
  end(): void {
    this.release?.();
    this.release = null;
  }

  /**
   * The answer of a command whose every try met another writer: nothing of it was written and no
   * receipt kept, so the same request sent again (under the same key) is decided anew.
   */
  exhausted(): GantryError {
    const streams = [...this.contended];
    const elapsedMs = Math.round(this.now() - this.started);
    return new GantryError(
      ErrorCode.VERSION_CONFLICT,
      `${streams.length > 0 ? `stream ${streams.join(', ')}` : 'a stream'} kept being appended to by other writers: ` +
        `decided ${this.tries} times over ${elapsedMs} ms, nothing written; the same request may be sent again`,
      { streams, attempts: this.tries, elapsedMs, written: false },
    );
  }
}
