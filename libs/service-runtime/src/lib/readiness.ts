import { Injectable } from '@nestjs/common';

export interface CheckResult {
  ok: boolean;
  detail?: unknown;
}

/** Named checks behind GET /ready; each part of a service adds its own. */
@Injectable()
export class Readiness {
  private readonly checks = new Map<string, () => Promise<CheckResult> | CheckResult>();

  register(name: string, check: () => Promise<CheckResult> | CheckResult): void {
    this.checks.set(name, check);
  }

  async evaluate(): Promise<{ ready: boolean; checks: Record<string, CheckResult> }> {
    const checks: Record<string, CheckResult> = {};
    for (const [name, check] of this.checks) {
      let timer: NodeJS.Timeout | undefined;
      try {
        checks[name] = await Promise.race([
          Promise.resolve(check()),
          new Promise<CheckResult>((resolve) => {
            timer = setTimeout(() => resolve({ ok: false, detail: 'check timed out' }), 2000);
          }),
        ]);
      } catch (error) {
        checks[name] = { ok: false, detail: String(error) };
      } finally {
        clearTimeout(timer);
      }
    }
    return { ready: Object.values(checks).every((c) => c.ok), checks };
  }
}

/** Liveness: a part of the process may declare it cannot go on (e.g. a runner whose token expired). */
@Injectable()
export class Liveness {
  private readonly problems = new Map<string, string>();

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
}
