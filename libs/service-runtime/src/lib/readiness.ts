import { Inject, Injectable } from '@nestjs/common';
import { HealthIndicatorService, type HealthIndicatorFunction, type HealthIndicatorResult } from '@nestjs/terminus';
import pTimeout from 'p-timeout';

export interface CheckResult {
  ok: boolean;
  detail?: unknown;
}

/** A check that gives no answer in this time counts as down (and a scrape of /metrics leaves out a reading that gives none). */
export const CHECK_TIMEOUT_MS = 2000;

/**
 * The named checks behind GET /ready, as @nestjs/terminus health indicators. The runtime adds its
 * own (database, nats, relay, consumers, see health-indicators.ts); each part of a service adds
 * what it needs with `register`. See docs/operations.md (health and readiness).
 */
@Injectable()
export class Readiness {
  private readonly checks = new Map<string, () => Promise<HealthIndicatorResult>>();

  constructor(@Inject(HealthIndicatorService) private readonly health: HealthIndicatorService) {}

  /** A check in this project's shape: ok, and what to show beside it. */
  register(name: string, check: () => Promise<CheckResult> | CheckResult): void {
    this.add(name, async () => {
      const { ok, detail } = await check();
      return verdict(this.health, name, ok, indicatorData(detail));
    });
  }

  /** A terminus indicator under `name` (its result's key must be `name`). */
  add(name: string, indicator: () => Promise<HealthIndicatorResult>): void {
    this.checks.set(name, indicator);
  }

  /** Every check as terminus runs them: one that throws or does not answer in time is down, with the reason. */
  indicators(): HealthIndicatorFunction[] {
    return [...this.checks].map(([name, indicator]) => () => this.run(name, indicator));
  }

  /** All checks at once, without HTTP (for in-process callers). */
  async evaluate(): Promise<{ ready: boolean; details: HealthIndicatorResult }> {
    const results = await Promise.all(this.indicators().map((indicator) => (indicator as () => Promise<HealthIndicatorResult>)()));
    const details: HealthIndicatorResult = Object.assign({}, ...results);
    return { ready: Object.values(details).every((d) => d.status === 'up'), details };
  }

  private async run(name: string, indicator: () => Promise<HealthIndicatorResult>): Promise<HealthIndicatorResult> {
    try {
      return await pTimeout(indicator(), { milliseconds: CHECK_TIMEOUT_MS, fallback: () => this.health.check(name).down('check timed out') });
    } catch (error) {
      return this.health.check(name).down(error instanceof Error ? error.message : String(error));
    }
  }
}

/** An indicator's result: `key` up or down, with what was judged beside the status. */
export function verdict(health: HealthIndicatorService, key: string, ok: boolean, data?: Record<string, unknown>): HealthIndicatorResult {
  return ok ? health.check(key).up(data) : health.check(key).down(data);
}

/** Terminus's way: an object's fields beside `status` (a key of that name would clash), text under `message`. */
function indicatorData(detail: unknown): Record<string, unknown> | undefined {
  if (detail === undefined || detail === null) return undefined;
  if (typeof detail !== 'object' || Array.isArray(detail)) return { message: String(detail) };
  return 'status' in detail ? { detail } : (detail as Record<string, unknown>);
}

/** Liveness: a part of the process may declare it cannot go on (e.g. a runner whose token expired). */
@Injectable()
export class Liveness {
  private readonly problems = new Map<string, string>();

  constructor(@Inject(HealthIndicatorService) private readonly health: HealthIndicatorService) {}

  markUnhealthy(component: string, reason: string): void {
    this.problems.set(component, reason);
  }

  markHealthy(component: string): void {
    this.problems.delete(component);
  }

  get healthy(): boolean {
    return this.problems.size === 0;
  }

  get reasons(): Record<string, string> {
    return Object.fromEntries(this.problems);
  }

  /** GET /health: `process` up while no part objects, else each part that objects, down with its reason. */
  indicators(): HealthIndicatorFunction[] {
    if (this.problems.size === 0) return [() => this.health.check('process').up()];
    return [...this.problems].map(([component, reason]) => () => this.health.check(component).down(reason));
  }
}
