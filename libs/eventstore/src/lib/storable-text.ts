import type { SecretScrubber } from '@gantry/contracts';

/**
 * Text as PostgreSQL can keep it: a NUL character (U+0000) becomes U+FFFD, the replacement
 * character. `text` and `jsonb` refuse a NUL, and so does `json_to_recordset`, which the
 * one-message write and the views read their rows with; free text from outside (what an agent
 * reports, the message of a failed git command) may carry one, and would otherwise fail its command
 * with an error no caller can act on (docs/architecture.md, "The event log in PostgreSQL").
 */
export function storableText(text: string): string {
  return text.includes('\u0000') ? text.replaceAll('\u0000', '\uFFFD') : text;
}

/** The scrubber an event store writes with: secrets masked, and the text made storable. */
export function storableScrubber(scrub: SecretScrubber): SecretScrubber {
  return (text) => scrub(storableText(text));
}

/** A JSON.stringify replacer for a value stored as it is (a command's answer in its receipt): its strings made storable. */
export function storableStrings(_key: string, value: unknown): unknown {
  return typeof value === 'string' ? storableText(value) : value;
}
