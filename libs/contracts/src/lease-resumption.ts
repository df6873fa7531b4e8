/**
 * Whether a lease that ends at `expiresAt` ran out while a service still served its holders: by the
 * latest lease sweep any replica made with its bus up (`lastSweptAt`: serving is taken to have stopped
 * then, as nothing later proves a replica served), and by `now` (a sweep stamped later than this
 * replica's now, its clock ahead, proves nothing beyond now). A start after nobody served, or a bus back
 * after a loss, resumes only the leases that did not — its holder could have renewed one that did, and
 * it is the expiry sweep's (docs/jobs.md, "A job service outage"; docs/worktrees.md, "When a lease ends").
 * No sweep known (null): none ran out while one served, as far as anyone can tell.
 */
export function ranOutWhileServed(expiresAt: string, now: string, lastSweptAt: string | null | undefined): boolean {
  return !!lastSweptAt && Date.parse(expiresAt) <= Math.min(Date.parse(now), Date.parse(lastSweptAt));
}
