/**
 * The durable consumer of the service's own stream that its consumers of that stream share: each of
 * its events is delivered to the service once, not once per consumer (`SharedDurable`,
 * docs/architecture.md, "Durable consumers").
 */
export const OWN_EVENTS_DURABLE = 'job-service-own-events';
