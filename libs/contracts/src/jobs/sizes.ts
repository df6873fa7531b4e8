/*
 * How large a job may be (docs/jobs.md, "How large a job may be"). A job travels whole in one NATS
 * message — its claim, `get_job`, a page of `list_jobs` — and its requests in events, each one
 * message too; NATS carries at most its max_payload (1 MiB by default). A request that would make a
 * job or an event too large for one message is refused at the contract, INVALID_COMMAND naming the
 * limit, before anything is written: accepted, such a job could never be claimed or read.
 */

/**
 * A job's prompts and payloads, as JSON (`jobInputBytes`): one request's, and what coalescing may
 * grow a job to. JSON, not the characters: a control character is one byte of UTF-8 but six of
 * JSON (`\u0001`), and JSON is what the messages carry.
 */
export const MAX_JOB_INPUT_BYTES = 256 * 1024;

/**
 * An `enqueue_job` or a `create_sprint_run` request as a whole, as JSON: its event carries all of it
 * (the story's tasks, the configuration cascade, the sprint's task payloads), and a job's
 * configuration travels with the job.
 */
export const MAX_JOB_REQUEST_BYTES = 384 * 1024;

/**
 * A task payload of a sprint run: its job's input with room for the prompt the job service writes
 * for it ("Implement task … of sprint … on branch …", a few KiB at most as JSON).
 */
export const MAX_SPRINT_TASK_PAYLOAD_BYTES = MAX_JOB_INPUT_BYTES - 8 * 1024;

const measured = new WeakMap<object, number>();

/**
 * The UTF-8 bytes of a value as JSON; 0 for undefined (JSON leaves it out). An object or array is
 * written out once and its size kept: a parsed request is not changed afterwards, so the handler's
 * measure of a payload (the run queue's) costs nothing after the contract's. A value nested too
 * deeply for JSON.stringify's recursion (the services refuse such a request before its schema, but a
 * caller's own check meets it first) weighs Infinity: refused as too large, not thrown.
 */
export function jsonBytes(value: unknown): number {
  if (value === undefined) return 0;
  if (value === null || typeof value !== 'object') return Buffer.byteLength(JSON.stringify(value));
  let bytes = measured.get(value);
  if (bytes === undefined) {
    try {
      bytes = Buffer.byteLength(JSON.stringify(value));
    } catch (error) {
      if (!(error instanceof RangeError)) throw error;
      bytes = Number.POSITIVE_INFINITY;
    }
    measured.set(value, bytes);
  }
  return bytes;
}

/** The most a text can be as JSON, without reading it: six bytes a UTF-16 unit (`\u0001`), and its quotes. */
export function jsonBytesAtMost(text: string): number {
  return text.length * 6 + 2;
}

/** What a job's input weighs in its messages: its prompts and payloads as JSON. */
export function jobInputBytes(prompts: readonly string[], payloads: readonly unknown[]): number {
  let bytes = 0;
  for (const prompt of prompts) bytes += jsonBytes(prompt);
  for (const payload of payloads) bytes += jsonBytes(payload);
  return bytes;
}

/** The message of a refusal for size: the limit by name and value, and what the request weighs. */
export function tooLargeMessage(what: string, bytes: number, limit: number, name: string): string {
  if (!Number.isFinite(bytes)) return `${what}: nested too deeply to be written out as JSON; at most ${limit} bytes are accepted (${name})`;
  return `${what}: ${bytes} bytes as JSON; at most ${limit} bytes are accepted (${name}), so that the job fits one message`;
}

/**
 * The first items of a list, as many as fit `maxBytes` as a JSON array (at least one, however large:
 * a list that must name something names its first). What a message keeps of a list longer than it
 * carries; the caller says how many were left out.
 */
export function firstWithin<T>(items: readonly T[], maxBytes: number): T[] {
  let bytes = 2;
  let kept = 0;
  while (kept < items.length && (kept === 0 || bytes + jsonBytes(items[kept]) + 1 <= maxBytes)) bytes += jsonBytes(items[kept++]) + 1;
  return items.slice(0, kept);
}
