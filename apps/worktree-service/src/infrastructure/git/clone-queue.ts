/*
 * Git operations on one shared clone (fetch, worktree add/remove, new branches) take locks on its
 * refs and its worktree list; two at once fail with "cannot lock ref", and some of the clone's
 * repairs (an unborn worktree's registration removed by a fetch) are only right when no other git
 * works on the clone. So runs on one clone take turns: within this process by a queue per clone, and
 * between the processes that share the root (replicas of the service on one host) by the workspace's
 * `acrossProcesses` lock, taken once this process's turn has come (docs/worktrees.md, "Replicas").
 */
import type { GitWorkspace } from './workspace.js';

const tails = new Map<string, Promise<unknown>>();

export function serializedOnClone<T>(workspace: Pick<GitWorkspace, 'acrossProcesses'>, clonePath: string, work: () => Promise<T>): Promise<T> {
  const turn = workspace.acrossProcesses ? () => workspace.acrossProcesses!(clonePath, work) : work;
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
