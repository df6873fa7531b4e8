/**
 * Secrets never reach an event: free text that enters one (an agent's stderr in a rollback's reason,
 * an error message) goes through one scrubber first (docs/configuration.md, "Secrets in events").
 * It masks what looks like a credential wherever it stands, and every value the process knows to be
 * secret (its environment's tokens, keys and passwords) verbatim.
 */

/** What a masked secret becomes. */
export const MASK = '***';

/** Values shorter than this are not masked verbatim: they would mask ordinary words. */
const MIN_KNOWN_SECRET_LENGTH = 8;

/**
 * Credentials by their shape, each with the part to keep. Word boundaries keep ordinary words
 * (`task-…`, `tokenExpired`) out.
 */
const SHAPES: ReadonlyArray<{ pattern: RegExp; keep: (match: string, ...groups: string[]) => string }> = [
  // A PEM private key, whole.
  { pattern: /-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)/g, keep: () => MASK },
  // An Authorization header's credentials: `Authorization: Bearer x`, `authorization=Basic x`, `"Authorization":"token x"`.
  {
    pattern: /\b((?:proxy-)?authorization["']?\s*[:=]\s*["']?)(?:(bearer|basic|token|digest)\s+)?[^\s"',;]+/gi,
    keep: (_, head: string, scheme?: string) => `${head}${scheme ? `${scheme} ` : ''}${MASK}`,
  },
  // `Bearer x` anywhere.
  { pattern: /\b(bearer)\s+[A-Za-z0-9._~+/=-]{8,}/gi, keep: (_, scheme: string) => `${scheme} ${MASK}` },
  // A URL's user info with a password (`scheme://user:pass@`), or any user info of http(s) (a token as user name).
  { pattern: /\b([a-z][a-z0-9+.-]*:\/\/)([^\s/@:]+):([^\s/@]*)@/gi, keep: (_, scheme: string, user: string) => `${scheme}${user}:${MASK}@` },
  { pattern: /\b(https?:\/\/)[^\s/@:]+@/gi, keep: (_, scheme: string) => `${scheme}${MASK}@` },
  // `NAME=value` / `name: value` where the name says it holds a secret (GITHUB_TOKEN=…, password: …, "api_key":"…").
  {
    pattern: /\b([A-Za-z0-9_.-]*(?:token|secret|password|passwd|api[_-]?key|private[_-]?key|credentials?)["']?\s*[:=]\s*["']?)(?!\*\*\*)[^\s"',;&]{4,}/gi,
    keep: (_, head: string) => `${head}${MASK}`,
  },
  // Token formats: GitHub, Anthropic and OpenAI-style keys, Slack, AWS access keys, JWTs.
  { pattern: /\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|sk-ant-[A-Za-z0-9_-]{10,}|sk-[A-Za-z0-9_-]{20,}|xox[abprs]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16})\b/g, keep: () => MASK },
  { pattern: /\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}/g, keep: () => MASK },
];

/** Every shape above needs one of these; a string without any holds none of them. */
const MAY_HOLD_A_SHAPE = /[:=@]|bearer|gh[pousr]_|github_pat_|sk-|xox|AKIA|eyJ|-----BEGIN/i;
/** No shape and no masked value is shorter than this. */
const MIN_SECRET_TEXT_LENGTH = MIN_KNOWN_SECRET_LENGTH;

export type SecretScrubber = (text: string) => string;

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/** A scrubber that also masks these values verbatim (the longest first, so a value inside another goes with it). */
export function secretScrubber(knownSecrets: Iterable<string> = []): SecretScrubber {
  const values = [...new Set(knownSecrets)].filter((v) => v.length >= MIN_KNOWN_SECRET_LENGTH).sort((a, b) => b.length - a.length);
  const known = values.length === 0 ? null : new RegExp(values.map(escapeRegExp).join('|'), 'g');
  return (text) => {
    if (text.length < MIN_SECRET_TEXT_LENGTH) return text;
    const scrubbed = known === null ? text : text.replace(known, MASK);
    // One pass tells most strings (ids, names, SHAs) from ones that may hold a credential's shape.
    if (!MAY_HOLD_A_SHAPE.test(scrubbed)) return scrubbed;
    return SHAPES.reduce((current, { pattern, keep }) => current.replace(pattern, keep as (match: string, ...rest: unknown[]) => string), scrubbed);
  };
}

/** Masks credentials by their shape (no values known). */
export const scrubSecrets: SecretScrubber = secretScrubber();

/** A JSON.stringify replacer that scrubs every string value (keys and other values as they are). */
export function scrubbingReplacer(scrub: SecretScrubber = scrubSecrets): (key: string, value: unknown) => unknown {
  return (_key, value) => (typeof value === 'string' ? scrub(value) : value);
}

/** Every string inside a JSON value, scrubbed (keys and other values as they are). */
export function scrubStrings<T>(value: T, scrub: SecretScrubber = scrubSecrets): T {
  if (typeof value === 'string') return scrub(value) as T;
  if (Array.isArray(value)) return value.map((item) => scrubStrings(item, scrub)) as T;
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, scrubStrings(item, scrub)])) as T;
  }
  return value;
}

/** A variable whose name says it holds a secret; `…_PATH`, `…_FILE`, `…_PATTERN` name where or how, not the secret. */
const SECRET_NAME = /(?:TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|PRIVATE_KEY|CREDENTIALS?)(?:S)?$|(?:TOKEN|SECRET|PASSWORD|API_?KEY)_/i;
const NOT_A_SECRET = /_(?:PATH|FILE|PATTERN|MS|S|ID|URL)$/i;

/**
 * The secret values in an environment: the values of variables named like secrets
 * (GANTRY_GITHUB_TOKEN, ANTHROPIC_API_KEY, GANTRY_HTTP_TOKEN, GANTRY_GITHUB_WEBHOOK_SECRETS — each
 * comma-separated part — …) and the passwords of URLs (GANTRY_DATABASE_URL, GANTRY_NATS_URL).
 */
export function secretValuesIn(env: Record<string, string | undefined>): string[] {
  const values: string[] = [];
  for (const [name, raw] of Object.entries(env)) {
    const value = raw?.trim();
    if (!value) continue;
    if (SECRET_NAME.test(name) && !NOT_A_SECRET.test(name)) {
      values.push(value, ...value.split(',').map((part) => part.trim()));
      continue;
    }
    for (const url of value.split(',')) {
      const password = /^[a-z][a-z0-9+.-]*:\/\/[^\s/@:]*:([^\s/@]+)@/i.exec(url.trim())?.[1];
      if (password) values.push(password, decodeURIComponentSafely(password));
    }
  }
  return values.filter((v) => v.length >= MIN_KNOWN_SECRET_LENGTH);
}

function decodeURIComponentSafely(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}
