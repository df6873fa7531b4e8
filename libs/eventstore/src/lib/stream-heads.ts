import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The SQLSTATE `gantry_expect_stream_heads` raises when a stream does not end where a command
 * decided from memory thought it did (see CommandBatcher.remembered).
 */
export const STREAM_HEAD_MOVED = 'GX001';

/**
 * `gantry_expect_stream_heads(heads)`: for each `{ stream_id, version, event_id }` of the JSON
 * array, the stream's event at that version must be that event, or the statement fails with
 * STREAM_HEAD_MOVED. It goes in the write message of a command decided on streams it remembered
 * rather than read: the compare-and-set (the unique stream version) refuses an append at a version
 * another writer took, but not one after a stream that became shorter than remembered (a log
 * rebuilt under a running process), which would leave a gap.
 */
export class EventLogStreamHeads1781000000000 implements MigrationInterface {
  name = 'EventLogStreamHeads1781000000000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      CREATE FUNCTION gantry_expect_stream_heads(heads jsonb) RETURNS void LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
      DECLARE
        moved text;
      BEGIN
        SELECT h.stream_id INTO moved
          FROM jsonb_to_recordset(heads) AS h(stream_id text, version int, event_id uuid)
         WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.stream_id = h.stream_id AND e.stream_version = h.version AND e.event_id = h.event_id)
         LIMIT 1;
        IF moved IS NOT NULL THEN
          RAISE EXCEPTION 'stream % does not end where it was remembered', moved USING ERRCODE = '${STREAM_HEAD_MOVED}';
        END IF;
      END
      $$`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP FUNCTION IF EXISTS gantry_expect_stream_heads(jsonb)`);
  }
}
