import { ErrorCode, getTaskSession, isGantryError, type SessionView } from '@gantry/contracts';
import type { CommandClient } from '@gantry/messaging';

/**
 * The task's agent session as the workflow engine keeps it (docs/workflow-engine.md, AC-S1): what
 * the next job of the task runs with. A task the engine does not know has none; an engine that does
 * not answer leaves the job to run with its own configuration, and says so.
 */
export async function taskSessionOf(
  commands: CommandClient,
  taskId: string,
  timeoutMs: number,
  abandon?: AbortSignal,
): Promise<{ session: SessionView | null; unanswered: string | null }> {
  try {
    return { session: await commands.request(getTaskSession, { taskId }, { timeoutMs, abandon }), unanswered: null };
  } catch (error) {
    if (isGantryError(error) && error.code === ErrorCode.NOT_FOUND) return { session: null, unanswered: null };
    if (isGantryError(error) && (error.code === ErrorCode.UNAVAILABLE || error.code === ErrorCode.TIMEOUT)) return { session: null, unanswered: error.message };
    throw error;
  }
}
