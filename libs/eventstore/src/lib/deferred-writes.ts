import pg from 'pg';

/** Where a write goes that nobody reads a result of: a connection, or DeferredWrites' writer. */
export interface SqlWriter {
  query(text: string, values?: unknown[]): Promise<unknown>;
}

/**
 * A statement with its parameters written in as literals, for a simple-protocol message that
 * carries several statements (parameters need the extended protocol: one statement per round
 * trip). Each value becomes a quoted literal, the text form pg sends a parameter in, so its type
 * is inferred from where it stands just as a parameter's is. Scalars, dates and JSON values only;
 * `$n` must not appear inside the statement's own string literals.
 */
export function inlineStatement(text: string, values: readonly unknown[] = []): string {
  return text.replace(/\$(\d+)\b/g, (_, n: string) => {
    const index = Number(n) - 1;
    if (index < 0 || index >= values.length) throw new RangeError(`statement refers to $${n}, but ${values.length} values were given`);
    return literalOf(values[index]);
  });
}

/**
 * A statement's parameter that is a JSON array of rows, each of which the statement writes on its
 * own (read with `json_to_recordset` or `jsonb_to_recordset`): commands written together whose statements have the same
 * texts and take their rows this way are sent as one statement per text with all their rows
 * (CommandBatcher). Only for statements where one row does not depend on another. pg sends it as
 * its JSON (`toPostgres`).
 */
export class JsonRows {
  /** `json`: a JSON array (its text). */
  constructor(readonly json: string) {
    if (!json.startsWith('[') || !json.endsWith(']')) throw new TypeError('JsonRows takes the text of a JSON array');
  }

  toPostgres(): string {
    return this.json;
  }
}

/** The rows as one parameter of their statement (see JsonRows). */
export function jsonRows(rows: readonly unknown[]): JsonRows {
  return new JsonRows(JSON.stringify(rows));
}

/** A value as a quoted literal, the text form pg sends a parameter in (see inlineStatement). */
export function literalOf(value: unknown): string {
  if (value === null || value === undefined) return 'NULL';
  if (value instanceof JsonRows) return quoted(value.json);
  if (value instanceof Date) return quoted(value.toISOString());
  if (Array.isArray(value)) throw new TypeError('inlineStatement takes no arrays: pass them as JSON');
  if (typeof value === 'object') return quoted(JSON.stringify(value));
  return quoted(String(value));
}

/**
 * `text` as a string literal: what pg's `escapeLiteral` returns (quotes doubled; with a backslash,
 * an E'' literal with backslashes doubled), by two native replaces instead of its loop over the
 * characters, which was a few per cent of the job service's CPU on the events' JSON.
 */
function quoted(text: string): string {
  const inner = text.replace(/'/g, "''");
  return text.includes('\\') ? ` E'${inner.replace(/\\/g, '\\\\')}'` : `'${inner}'`;
}

type Query = (...args: unknown[]) => unknown;

/**
 * Writes of a transaction held back until its next statement, and sent in one message with it —
 * usually the COMMIT with the command's receipt, so the write costs no round trip of its own.
 * While writes wait, the connection's `query` is wrapped: whatever the transaction sends next
 * (a read that must see them, a savepoint, the commit) goes after them, so the transaction reads
 * its own writes as if they had been sent at once. A failing write fails that next statement with
 * its own error; a ROLLBACK drops them unsent. `end()` takes the wrapper off (the connection goes
 * back to the pool as it came).
 */
export class DeferredWrites {
  private pending: string[] = [];
  private wrapped = false;

  constructor(private readonly client: pg.PoolClient) {}

  /** Takes writes for later: the projection's writer inside a command. */
  readonly writer: SqlWriter = {
    query: async (text, values) => {
      this.pending.push(inlineStatement(text, values));
      this.wrap();
    },
  };

  end(): void {
    this.unwrap();
    this.pending = [];
  }

  private wrap(): void {
    if (this.wrapped) return;
    this.wrapped = true;
    const client = this.client as unknown as { query: Query };
    const send = Object.getPrototypeOf(client).query as Query;
    client.query = (...args: unknown[]) => {
      const writes = this.pending;
      this.pending = [];
      this.unwrap();
      const [text, ...rest] = args;
      if (typeof text === 'string' && /^\s*ROLLBACK\s*;?\s*$/i.test(text)) return send.apply(client, args);
      if (typeof text === 'string' && rest.length === 0) {
        // One message: the writes, then the caller's statement(s); the caller gets its own results.
        return (send.call(client, [...writes, text].join(';\n')) as Promise<pg.QueryResult[]>).then((results) => {
          const own = results.slice(writes.length);
          return own.length === 1 ? own[0] : own;
        });
      }
      // A statement with parameters goes in a message of its own, right after the writes (a
      // connection sends its queries in order); the writes' error, if any, is the one reported.
      let failure: unknown = null;
      const written = (send.call(client, writes.join(';\n')) as Promise<unknown>).catch((error: unknown) => {
        failure = error;
      });
      const result = send.apply(client, args);
      if (!(result instanceof Promise)) return result;
      return result.then(
        async (value) => {
          await written;
          return value;
        },
        async (error: unknown) => {
          await written;
          throw failure ?? error;
        },
      );
    };
  }

  private unwrap(): void {
    if (!this.wrapped) return;
    this.wrapped = false;
    delete (this.client as unknown as { query?: Query }).query;
  }
}
