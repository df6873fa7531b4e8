import type { LogRecord } from './harness.js';

/**
 * AC-G2: a diagnostic carries each named field as a field of its own, and its message is a constant
 * sentence that interpolates none of them.
 */
export function expectDiscreteFields(record: LogRecord | undefined, fields: Record<string, unknown>): void {
  expect(record).toBeDefined();
  for (const [name, value] of Object.entries(fields)) {
    expect({ field: name, value: record![name] }).toEqual({ field: name, value });
    if (typeof value === 'string' && value.length > 2) expect(record!.message).not.toContain(value);
  }
}

/** The records of one rule about one task. */
export function ruleRecords(records: LogRecord[], rule: string, taskId: string): LogRecord[] {
  return records.filter((r) => r.rule === rule && r.taskId === taskId);
}
