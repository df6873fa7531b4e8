// Test-only: starts the probe service (probe-service.ts, built) as its own process.
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Naming } from '@gantry/contracts';
import { startEntry, type RunningProcess } from '@gantry/testing';

/** The compiled probe (`npx nx run service-runtime:build`). */
export const probeEntry = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../dist/testing/probe-service.js');

/** Terminus's body: the failing checks under `error`, every check under `details`. */
export interface HealthBody {
  status: 'ok' | 'error' | 'shutting_down';
  error: Record<string, { status: string } & Record<string, unknown>>;
  details: Record<string, { status: string } & Record<string, unknown>>;
}

export interface ProbeProcess extends RunningProcess {
  ready(): Promise<{ status: number; body: HealthBody }>;
}

/** The probe on the test's schema and naming, logging at `info`; resolves once it runs (not once it is ready). */
export async function startProbe(options: { schema: string; naming: Naming; env?: Record<string, string> }): Promise<ProbeProcess> {
  const probe = await startEntry(probeEntry, 'runtime probe', { ...options, env: { LOG_LEVEL: 'info', ...options.env }, waitReady: false });
  return {
    ...probe,
    ready: async () => {
      const response = await fetch(`${probe.url}/ready`);
      return { status: response.status, body: (await response.json()) as HealthBody };
    },
  };
}
