/** Injection tokens of the pr-service's ports. */
export const GITHUB_PULL_REQUESTS = Symbol('pr-service:github-pull-requests');
export const CONFLICTING_FILES = Symbol('pr-service:conflicting-files');
export { PR_SERVICE_CONFIG } from '../infrastructure/pr-service-config.js';
