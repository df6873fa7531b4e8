import { claimVerdict, type KnownJob } from './claim-ends.js';

const job = (status: string, leaseToken: number | null, endedBy: KnownJob['endedBy'] = null): KnownJob => ({ status, leaseToken, endedBy });

describe('what a job’s state means for a lease of one of its claims', () => {
  it('keeps the lease of the live claim', () => {
    expect(claimVerdict(job('RUNNING', 2), 2, true)).toEqual({ kind: 'keep' });
    expect(claimVerdict(job('CLAIMED', 2), 2, false)).toEqual({ kind: 'keep' });
  });

  it('releases at once when the claim’s own holder ended it (a finish, a rollback, a confirmed stop)', () => {
    for (const status of ['DONE', 'FAILED', 'SKIPPED', 'CANCELLED', 'QUEUED']) {
      expect({ status, verdict: claimVerdict(job(status, 2, 'holder'), 2, false) }).toEqual({ status, verdict: { kind: 'release' } });
    }
  });

  it('releases at once when the job service ended the claim before it was started: no agent of it ran', () => {
    expect(claimVerdict(job('QUEUED', 2, 'service_before_start'), 2, false)).toEqual({ kind: 'release' });
    expect(claimVerdict(job('FAILED', 2, 'service_before_start'), 2, false)).toEqual({ kind: 'release' });
    // Only the claim that ended so: an older claim's lease may still have its agent.
    expect(claimVerdict(job('QUEUED', 2, 'service_before_start'), 1, false)).toEqual({ kind: 'await_holder', cause: 'claim_superseded' });
  });

  it('waits for the holder when the job service ended the claim: a cancel, an expired lease', () => {
    expect(claimVerdict(job('CANCELLED', 2, 'service'), 2, false)).toEqual({ kind: 'await_holder', cause: 'job_cancelled' });
    expect(claimVerdict(job('QUEUED', 2, 'service'), 2, false)).toEqual({ kind: 'await_holder', cause: 'job_lease_expired' });
    expect(claimVerdict(job('FAILED', 2, 'service'), 2, false)).toEqual({ kind: 'await_holder', cause: 'job_lease_expired' });
    // A row written before causes were recorded counts as not the holder's word.
    expect(claimVerdict(job('CANCELLED', 2, null), 2, false)).toEqual({ kind: 'await_holder', cause: 'job_cancelled' });
  });

  it('waits for the holder of a claim a newer claim superseded', () => {
    expect(claimVerdict(job('RUNNING', 3), 2, false)).toEqual({ kind: 'await_holder', cause: 'claim_superseded' });
    expect(claimVerdict(job('DONE', 3, 'holder'), 2, false)).toEqual({ kind: 'await_holder', cause: 'claim_superseded' });
  });

  it('decides about a claim it never heard of only with every job event handled, unless the job has ended', () => {
    expect(claimVerdict(undefined, 1, false)).toEqual({ kind: 'keep' });
    expect(claimVerdict(undefined, 1, true)).toEqual({ kind: 'await_holder', cause: 'claim_unknown' });
    expect(claimVerdict(job('QUEUED', null), 1, false)).toEqual({ kind: 'keep' });
    expect(claimVerdict(job('QUEUED', 1, 'holder'), 2, false)).toEqual({ kind: 'keep' });
    expect(claimVerdict(job('QUEUED', 1, 'holder'), 2, true)).toEqual({ kind: 'await_holder', cause: 'claim_unknown' });
    expect(claimVerdict(job('CANCELLED', null, 'service'), 1, false)).toEqual({ kind: 'await_holder', cause: 'job_cancelled' });
    expect(claimVerdict(job('DONE', 1, 'holder'), 2, false)).toEqual({ kind: 'await_holder', cause: 'claim_unknown' });
  });
});
