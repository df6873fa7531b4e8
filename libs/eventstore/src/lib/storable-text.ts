import type { SecretScrubber } from '@gantry/contracts';

/** A NUL, or a UTF-16 surrogate without its other half. */
// eslint-disable-next-line no-control-regex -- the NUL is what it looks for
const UNSTORABLE = /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/**
 * Text as PostgreSQL can keep it: a NUL character (U+0000) and a lone surrogate (half of a UTF-16
 * pair, which JSON can spell as `"\ud800"` but which is no character) become U+FFFD, the
 * replacement character. `text` and `jsonb` refuse a NUL, `jsonb` and `json_to_recordset` refuse a
 * lone surrogate, and the one-message write and the views read their rows with `json_to_recordset`;
 * free text from outside (what an agent reports, the message of a failed git command, a request's
 * strings) may carry one, and would otherwise fail its command with an error no caller can act on
 * (docs/architecture.md, "The event log in PostgreSQL").
 */
export function storableText(text: string): string {
  // isWellFormed (native, Node 20) keeps the common case cheap: every string of every event comes here.
  return text.includes('\u0000') || !(text as unknown as { isWellFormed(): boolean }).isWellFormed() ? text.replace(UNSTORABLE, '\uFFFD') : text;
}

/** The scrubber an event store writes with: secrets masked, and the text made storable. */
export function storableScrubber(scrub: SecretScrubber): SecretScrubber {
  return (text) => scrub(storableText(text));
}

/** A JSON.stringify replacer for a value stored as it is (a command's answer in its receipt): its strings made storable. */
export function storableStrings(_key: string, value: unknown): unknown {
  return typeof value === 'string' ? storableText(value) : value;
}

/**
 * A decoded JSON value with every string, and every object key, made storable (`storableText`): a
 * command's request as the transport hands it on, so an id or a key the handler looks up in
 * PostgreSQL is the very text the store keeps (docs/architecture.md, "Commands").
 */
export function storableValue(value: unknown): unknown {
  if (typeof value === 'string') return storableText(value);
  if (value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) {
    const items = value.map(storableValue);
    return items.every((item, i) => item === value[i]) ? value : items;
  }
  const entries = Object.entries(value);
  const storable = entries.map(([key, item]) => [storableText(key), storableValue(item)] as const);
  // The value itself when nothing changed; fromEntries makes a key "__proto__" a key, as JSON.parse did.
  return storable.every(([key, item], i) => key === entries[i][0] && item === entries[i][1]) ? value : Object.fromEntries(storable);
}
