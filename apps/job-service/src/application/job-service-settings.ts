import { defineSettings, setting } from '@gantry/service-runtime';

/** The job service's own settings (docs/configuration.md); the shared ones are the runtime's. */
export interface JobServiceConfig {
  /** How often each replica looks for expired job leases. */
  leaseSweepMs: number;
  /** Queued jobs a claim's look-up reads beyond what its claims need, for the next claims (0: none). */
  claimLookAhead: number;
  /** How often each replica looks for queued jobs whose offer is gone from the dispatch stream (docs/jobs.md, "Offers lost by JetStream"). */
  offerSweepMs: number;
}

export const JOB_SERVICE_CONFIG = Symbol('gantry:job-service-config');

export const jobServiceSettings = defineSettings({
  name: 'jobService',
  token: JOB_SERVICE_CONFIG,
  variables: {
    GANTRY_LEASE_SWEEP_MS: setting.wholeNumber({ min: 10, max: 3_600_000, default: 1000 }),
    GANTRY_CLAIM_LOOK_AHEAD: setting.wholeNumber({ min: 0, max: 1000, default: 32 }),
    GANTRY_OFFER_SWEEP_MS: setting.wholeNumber({ min: 100, max: 3_600_000, default: 60_000 }),
  },
  build: (v): JobServiceConfig => ({ leaseSweepMs: v.GANTRY_LEASE_SWEEP_MS, claimLookAhead: v.GANTRY_CLAIM_LOOK_AHEAD, offerSweepMs: v.GANTRY_OFFER_SWEEP_MS }),
});
