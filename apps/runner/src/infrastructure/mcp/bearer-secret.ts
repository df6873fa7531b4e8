import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { inspect } from 'node:util';

const REDACTED = '[redacted bearer secret]';

/**
 * The per-job secret the agent presents to the runner's tool server. It prints as "[redacted]" in
 * every form (string, JSON, util.inspect), so a log line that includes it by accident leaks nothing.
 */
export class BearerSecret {
  readonly #value: string;

  private constructor(value: string) {
    this.#value = value;
  }

  static generate(): BearerSecret {
    return new BearerSecret(randomBytes(32).toString('base64url'));
  }

  static of(value: string): BearerSecret {
    if (value.length < 16) throw new RangeError('a bearer secret needs at least 16 characters');
    return new BearerSecret(value);
  }

  /** The raw value, for the `--mcp-config` file only. */
  reveal(): string {
    return this.#value;
  }

  authorizationHeader(): string {
    return `Bearer ${this.#value}`;
  }

  /** Constant-time check of an `Authorization` header value. */
  matchesAuthorization(header: string | undefined): boolean {
    const match = /^Bearer ([^\s]+)$/i.exec(header ?? '');
    if (!match) return false;
    return timingSafeEqual(digest(match[1]!), digest(this.#value));
  }

  toString(): string {
    return REDACTED;
  }

  toJSON(): string {
    return REDACTED;
  }

  [inspect.custom](): string {
    return REDACTED;
  }
}

function digest(value: string): Buffer {
  return createHash('sha256').update(value).digest();
}
