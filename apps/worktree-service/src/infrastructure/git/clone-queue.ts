/*
 * Git operations on one shared clone (fetch, worktree add/remove, new branches) take locks on its
 * refs and its worktree list; two at once fail with "cannot lock ref", and some of the clone's
 * repairs (an unborn worktree's registration removed by a fetch) are only right when no other git
 * works on the clone. So runs on one clone take turns: within this process by a queue per clone, and
 * between the processes that share the root (replicas of the service on one host) by the workspace's
 * `acrossProcesses` lock, taken once this process's turn has come (docs/worktrees.md, "Replicas").
 */
import { withSignal, type GitWorkspace } from './workspace.js';

const tails = new Map<string, Promise<unknown>>();

/**
 * `work` gets the workspace to run its git with: one whose commands stop when the lock across
 * processes is lost while the work runs (the run then fails with the lock's error, retryable).
 */
export function serializedOnClone<T>(workspace: GitWorkspace, clonePath: string, work: (workspace: GitWorkspace) => Promise<T>): Promise<T> {
  const { acrossProcesses } = workspace;
  const turn = acrossProcesses ? () => acrossProcesses(clonePath, (signal) => work(withSignal(workspace, signal))) : () => work(workspace);
  const previous = tails.get(clonePath) ?? Promise.resolve();
  const run = previous.then(turn, turn);
  // The caller sees the run's failure; the queue only waits for it to end.
  const tail: Promise<void> = run.then(forgetWhenLast, forgetWhenLast);
  function forgetWhenLast(): void {
    if (tails.get(clonePath) === tail) tails.delete(clonePath);
  }
  tails.set(clonePath, tail);
  return run;
}
