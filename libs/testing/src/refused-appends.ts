import type pg from 'pg';

/**
 * Makes the database refuse every event of `type` appended to `streamId` in the schema `db` works on
 * (an operator's trigger on the log), as a write a sweep cannot make; returns the call that lets it
 * through again. One at a time per schema.
 */
export async function refuseAppends(db: Pick<pg.Pool, 'query'>, streamId: string, type: string): Promise<() => Promise<void>> {
  await db.query(`
    CREATE FUNCTION refuse_appends() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF NEW.stream_id = '${streamId}' AND NEW.type = '${type}' THEN RAISE EXCEPTION 'an operator trigger refuses this row'; END IF;
      RETURN NEW;
    END $$;
    CREATE TRIGGER refuse_appends BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION refuse_appends();`);
  return async () => {
    await db.query(`DROP TRIGGER refuse_appends ON events; DROP FUNCTION refuse_appends()`);
  };
}
