/*
 * Git operations on one shared clone (fetch, worktree add/remove, new branches) take locks on its
 * refs and its worktree list; two at once fail with "cannot lock ref". Within this process they
 * run one after another per clone. One worktree-service runs per host, so that is every caller.
 */
const tails = new Map<string, Promise<unknown>>();

export function serializedOnClone<T>(clonePath: string, work: () => Promise<T>): Promise<T> {
  const previous = tails.get(clonePath) ?? Promise.resolve();
  const run = previous.then(work, work);
  // The caller sees the run's failure; the queue only waits for it to end.
  const tail: Promise<void> = run.then(forgetWhenLast, forgetWhenLast);
  function forgetWhenLast(): void {
    if (tails.get(clonePath) === tail) tails.delete(clonePath);
  }
  tails.set(clonePath, tail);
  return run;
}
