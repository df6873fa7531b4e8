import { z } from 'zod';
import { canonicalJson } from './hashing.js';
import { commandContractKey, eventContractKey, type CommandContract, type EventContract } from './registry.js';

/**
 * What is wrong with one registered contract, as sentences; empty when it conforms.
 * The generic contract test runs this over every contract in the registry.
 */
export function contractProblems(contract: CommandContract | EventContract): string[] {
  return contract.kind === 'command' ? commandProblems(contract) : eventProblems(contract);
}

function commandProblems(contract: CommandContract): string[] {
  const problems: string[] = [];
  if (!/^[a-z][a-z0-9]*(_[a-z0-9]+)*$/.test(contract.name)) problems.push(`name "${contract.name}" is not snake_case`);
  if (!isZodSchema(contract.reply)) problems.push('reply is not a zod schema');
  if (!isZodSchema(contract.request)) problems.push('request is not a zod schema');
  else problems.push(...exampleProblems(contract.request, contract.examples));
  // A request crosses the bus as JSON: what the client may send must survive that.
  const request = isZodSchema(contract.request) ? contract.request : undefined;
  for (const [i, example] of (request ? (contract.examples?.valid ?? []) : []).entries()) {
    if (!request!.safeParse(example).success) continue; // already reported as refused
    const sent = throughJson(example);
    if (sent.ok && !request!.safeParse(sent.value).success) {
      problems.push(`valid example #${i} is refused once sent as JSON`);
    }
    if (!sent.ok) problems.push(`valid example #${i} cannot be sent as JSON: ${sent.error}`);
  }
  return problems.map((p) => `command ${commandContractKey(contract)}: ${p}`);
}

function eventProblems(contract: EventContract): string[] {
  const problems: string[] = [];
  if (!/^[A-Z][a-z0-9]*([A-Z][a-z0-9]*)*$/.test(contract.type)) problems.push(`type "${contract.type}" is not PascalCase`);
  if (!Number.isInteger(contract.schemaVersion) || contract.schemaVersion < 1) {
    problems.push(`schemaVersion ${contract.schemaVersion} is not a whole number ≥ 1`);
  }
  if (!isZodSchema(contract.data)) return [...problems, 'data is not a zod schema'].map((p) => `event ${eventContractKey(contract)}: ${p}`);
  problems.push(...exampleProblems(contract.data, contract.examples));
  // Events are stored and published as JSON and parsed again on every read and replay:
  // the parsed data, through JSON, must parse again to the same value.
  for (const [i, example] of (contract.examples?.valid ?? []).entries()) {
    const first = contract.data.safeParse(example);
    if (!first.success) continue;
    const stored = throughJson(first.data);
    if (!stored.ok) {
      problems.push(`valid example #${i} parses to data that cannot be stored as JSON: ${stored.error}`);
      continue;
    }
    const replayed = contract.data.safeParse(stored.value);
    if (!replayed.success) {
      problems.push(`valid example #${i} parses to data that is refused when read back from JSON: ${summary(replayed.error)}`);
    } else if (canonicalJson(replayed.data) !== canonicalJson(first.data)) {
      problems.push(`valid example #${i} reads back from JSON as a different value`);
    }
  }
  try {
    z.toJSONSchema(contract.data, { io: 'input' });
  } catch (error) {
    problems.push(`data has no JSON Schema form (needed by the compatibility snapshot): ${(error as Error).message}`);
  }
  return problems.map((p) => `event ${eventContractKey(contract)}: ${p}`);
}

function exampleProblems(schema: z.ZodType, examples: { valid: unknown[]; invalid: unknown[] } | undefined): string[] {
  if (!examples || !Array.isArray(examples.valid) || !Array.isArray(examples.invalid)) return ['has no examples'];
  const problems: string[] = [];
  if (examples.valid.length === 0) problems.push('has no valid example');
  if (examples.invalid.length === 0) problems.push('has no invalid example');
  for (const [i, example] of examples.valid.entries()) {
    const parsed = schema.safeParse(example);
    if (!parsed.success) problems.push(`valid example #${i} is refused: ${summary(parsed.error)}`);
  }
  for (const [i, example] of examples.invalid.entries()) {
    if (schema.safeParse(example).success) problems.push(`invalid example #${i} is accepted: ${preview(example)}`);
  }
  return problems;
}

function isZodSchema(value: unknown): value is z.ZodType {
  return value instanceof z.ZodType;
}

function throughJson(value: unknown): { ok: true; value: unknown } | { ok: false; error: string } {
  try {
    const text = JSON.stringify(value);
    if (text === undefined) return { ok: false, error: 'it has no JSON form' };
    return { ok: true, value: JSON.parse(text) };
  } catch (error) {
    return { ok: false, error: (error as Error).message };
  }
}

function summary(error: z.ZodError): string {
  return error.issues.map((i) => `${i.path.map(String).join('.') || '(root)'}: ${i.message}`).join('; ');
}

function preview(value: unknown): string {
  try {
    const text = JSON.stringify(value) ?? String(value);
    return text.length > 120 ? `${text.slice(0, 117)}...` : text;
  } catch {
    return String(value);
  }
}
