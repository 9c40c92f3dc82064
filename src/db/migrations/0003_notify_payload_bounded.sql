-- picket 0003: the wake-up NOTIFY never fails an enqueue.
--
-- 0001's trigger named every ready task type in the payload. NOTIFY refuses a payload of 8000
-- bytes or more, and the error fails the statement that enqueued: a bulk enqueue of about seventy
-- task names of 125 characters failed the caller's whole transaction. Past the limit the payload
-- now names no type ('*': work may be ready for any type), and every listening worker polls.
CREATE OR REPLACE FUNCTION {{schema}}.notify_jobs() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
  ready text;
BEGIN
  SELECT string_agg(DISTINCT type, ',') INTO ready FROM new_jobs WHERE run_at <= now();
  IF ready IS NOT NULL THEN
    IF octet_length(ready) >= 8000 THEN
      ready := '*';
    END IF;
    PERFORM pg_notify('picket:' || TG_TABLE_SCHEMA, ready);
  END IF;
  RETURN NULL;
END
$$;
