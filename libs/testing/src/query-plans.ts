import pg from 'pg';

interface PlanNode {
  'Actual Rows': number;
  'Actual Loops': number;
  'Rows Removed by Filter'?: number;
  'Rows Removed by Index Recheck'?: number;
  'Rows Removed by Join Filter'?: number;
  Plans?: PlanNode[];
}

/** The rows a step went through: those it passed on and those it read and dropped, over all its loops. */
function rowsRead(node: PlanNode): number {
  const dropped = (node['Rows Removed by Filter'] ?? 0) + (node['Rows Removed by Index Recheck'] ?? 0) + (node['Rows Removed by Join Filter'] ?? 0);
  return Math.max((node['Actual Rows'] + dropped) * node['Actual Loops'], ...(node.Plans ?? []).map(rowsRead));
}

/**
 * Runs `text` under EXPLAIN ANALYZE and answers the most rows any step of its plan went through
 * (passed on, or read and dropped by a filter): how far the statement read, whatever plan PostgreSQL
 * chose. A statement meant to read only what it answers (an index read in order, a look-up by key)
 * is held to that with it, not to a time.
 */
export async function mostRowsReadByAStep(sql: pg.Pool | pg.PoolClient, text: string, values: unknown[] = []): Promise<number> {
  const { rows } = await sql.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(`EXPLAIN (ANALYZE, FORMAT JSON) ${text}`, values);
  return rowsRead(rows[0]!['QUERY PLAN'][0].Plan);
}

/**
 * Runs `work` with the arguments of every query a node-postgres connection sends shown to `see` first
 * (which may change them, or act before the query leaves: take the network away, say).
 */
export async function watchingQueries(see: (args: unknown[]) => void, work: () => Promise<unknown>): Promise<void> {
  const send = pg.Client.prototype.query;
  pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
    see(args);
    return (send as (...a: unknown[]) => unknown).apply(this, args);
  } as typeof send;
  try {
    await work();
  } finally {
    pg.Client.prototype.query = send;
  }
}
