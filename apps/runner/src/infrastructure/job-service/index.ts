export * from './job-lease-session.js';
export * from './command-job-reporter.js';
export * from './offer-intake.js';
export * from './job-claim.js';
