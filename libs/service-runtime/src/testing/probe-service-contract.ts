// Test-only: the probe service's command and event (probe-service.ts).
import { z } from 'zod';
import { defineCommand, defineEvent } from '@gantry/contracts';

export const RuntimeProbeNote = defineCommand({
  context: 'workflow',
  name: 'runtime_probe_note',
  request: z.object({ jobId: z.string(), text: z.string(), hold: z.boolean().default(false) }),
  reply: z.object({ eventId: z.string() }),
  examples: { valid: [{ jobId: 'job-1', text: 'x' }], invalid: [{ text: 1 }] },
});

defineEvent({
  context: 'workflow',
  type: 'RuntimeProbeNoted',
  schemaVersion: 1,
  data: z.object({ jobId: z.string(), text: z.string(), hold: z.boolean() }),
  examples: { valid: [{ jobId: 'job-1', text: 'x', hold: false }], invalid: [{ text: 1 }] },
});
