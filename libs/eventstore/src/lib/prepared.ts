import { createHash } from 'node:crypto';
import type pg from 'pg';
import { JsonRows, literalOf } from './deferred-writes.js';

/** A statement with its parameters, as a connection's `query(text, values)` takes it. */
export interface Statement {
  text: string;
  values?: readonly unknown[];
}

/** Whether a statement takes its rows as its one parameter (JsonRows): such statements of the same text can be joined. */
export function takesRows(statement: Statement): boolean {
  return statement.values?.length === 1 && statement.values[0] instanceof JsonRows;
}

/** Statements of the same texts, each taking its rows (JsonRows): one per text, with the rows of all of them. */
export function joinRows(members: ReadonlyArray<readonly Statement[]>): Statement[] {
  return members[0]!.map(({ text }, i) => {
    const arrays = members.map((statements) => (statements[i]!.values![0] as JsonRows).json.slice(1, -1)).filter((rows) => rows.trim() !== '');
    return { text, values: [new JsonRows(`[${arrays.join(',')}]`)] };
  });
}

/**
 * Statements for a message of several, each sent as `EXECUTE name(literals)` of a statement its
 * connection prepared once (SQL `PREPARE`). A simple-protocol message cannot carry parameters, so
 * a statement in one is otherwise parsed, analysed and planned by PostgreSQL every time it arrives:
 * for the small statements of a command that is a good part of the server's work. node-postgres
 * names statements of the extended protocol only, one statement per round trip, hence this.
 *
 * Each connection's prepared names are remembered here; a PREPARE goes in a message of its own the
 * first time a connection meets a statement (a PREPARE outlives a failed message, so it must not
 * share one), named by the statement's text.
 */
export class PreparedStatements {
  private readonly prepared = new WeakMap<pg.PoolClient, Set<string>>();

  /** The statements as EXECUTEs, preparing on this connection the ones it has not met yet. */
  async executes(client: pg.PoolClient, statements: readonly Statement[]): Promise<string[]> {
    let known = this.prepared.get(client);
    if (!known) this.prepared.set(client, (known = new Set()));
    const executes: string[] = [];
    for (const { text, values = [] } of statements) {
      const name = nameOf(text);
      if (!known.has(name)) {
        await client.query(`PREPARE ${name} AS ${text}`);
        known.add(name);
      }
      executes.push(values.length === 0 ? `EXECUTE ${name}` : `EXECUTE ${name}(${values.map(literalOf).join(', ')})`);
    }
    return executes;
  }
}

const names = new Map<string, string>();

function nameOf(text: string): string {
  let name = names.get(text);
  if (name === undefined) names.set(text, (name = `gantry_${createHash('sha1').update(text).digest('hex').slice(0, 20)}`));
  return name;
}
