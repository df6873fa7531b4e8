import type pg from 'pg';
import type { MigrationInterface, QueryRunner } from 'typeorm';
import type { MigrationClass } from './migrations.js';

/*
 * The latest lease sweep any replica of a service made with its bus up: one row (`lease_sweeps`) in the
 * service's schema, stamped by the store's clock. A service that judges leases by its own clock resumes
 * the held leases when nobody could renew them (its start after nobody served, its bus back after a
 * loss), and nothing later than that sweep proves a replica served: a lease that ran out before it ran
 * out while one served, and is left to the expiry sweep (ranOutWhileServed, @gantry/contracts).
 * Unlogged: emptied by a crash of the server, it says no sweep is known, and every held lease is
 * resumed, as before the table existed.
 */

/** The migration, named `name`, that makes a service's `lease_sweeps`. */
export function leaseSweepsMigration(name: string): MigrationClass {
  return class implements MigrationInterface {
    name = name;

    async up(q: QueryRunner): Promise<void> {
      await q.query(`CREATE UNLOGGED TABLE lease_sweeps (one boolean PRIMARY KEY DEFAULT true CHECK (one), swept_at timestamptz NOT NULL)`);
    }

    async down(q: QueryRunner): Promise<void> {
      await q.query(`DROP TABLE IF EXISTS lease_sweeps`);
    }
  };
}

/** A sweep pass with the bus up, at `at`: a later start or bus loss resumes no lease that ran out by then. */
export async function recordLeaseSweep(sql: pg.Pool | pg.PoolClient, at: Date): Promise<void> {
  await sql.query(
    `INSERT INTO lease_sweeps (one, swept_at) VALUES (true, $1) ON CONFLICT (one) DO UPDATE SET swept_at = greatest(lease_sweeps.swept_at, EXCLUDED.swept_at)`,
    [at],
  );
}

/** When the latest sweep recorded was made (ISO), or null when none is known. */
export async function lastLeaseSweep(sql: pg.Pool | pg.PoolClient): Promise<string | null> {
  const { rows } = await sql.query<{ swept_at: Date }>(`SELECT swept_at FROM lease_sweeps`);
  return rows[0]?.swept_at.toISOString() ?? null;
}
