-- picket 0010: the slow claim without waiting behind another worker's.
--
-- claim_limited() (0007) serialises every slow claim of a schema on one advisory lock. With many
-- workers running queued or limited jobs, they stood in line for it: 32 workers, 15 of them
-- waiting at any moment (bench/workers.ts), each holding a connection and its whole poll, so the
-- fast claim of plain jobs that follows the slow one waited too. try_claim_limited() takes the
-- lock only if it is free; when it is not, it claims nothing and returns one row with o_busy, and
-- the worker claims its plain jobs and tries the slow claim again at its next poll (it waits for
-- the lock only when a poll interval has passed without a slow claim, so no worker is kept from
-- queued work for longer).
--
-- When the lock is free it calls claim_limited() unchanged, which takes the same lock again (a
-- transaction's own advisory lock is granted at once): 0007's argument holds as written, since the
-- lock is held before any of claim_limited()'s statements takes its snapshot.
CREATE FUNCTION {{schema}}.try_claim_limited(
  p_worker          text,
  p_types           text[],
  p_lims            int[],
  p_lease_ms        int[],
  p_backoff_base_ms int[],
  p_backoff_max_ms  int[],
  p_max_attempts    int[],
  p_cluster         int[],
  p_rate_max        int[],
  p_rate_window_ms  int[],
  p_queue_names     text[],
  p_queue_lims      int[],
  p_queue_default   int,
  p_total           int,
  p_tokens          uuid[]
) RETURNS TABLE (
  o_busy boolean, o_id bigint, o_type text, o_payload jsonb, o_attempts int, o_max_attempts int, o_created_at timestamptz,
  o_claim_token uuid, o_lease_ms int, o_ready_ms float8, o_queue text
)
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
  IF NOT pg_try_advisory_xact_lock(hashtextextended('picket.claim_limited:{{schema}}', 0)) THEN
    o_busy := true;
    RETURN NEXT;
    RETURN;
  END IF;
  RETURN QUERY
    SELECT false, c.o_id, c.o_type, c.o_payload, c.o_attempts, c.o_max_attempts, c.o_created_at, c.o_claim_token, c.o_lease_ms, c.o_ready_ms, c.o_queue
    FROM {{schema}}.claim_limited(p_worker, p_types, p_lims, p_lease_ms, p_backoff_base_ms, p_backoff_max_ms, p_max_attempts, p_cluster,
                                  p_rate_max, p_rate_window_ms, p_queue_names, p_queue_lims, p_queue_default, p_total, p_tokens) AS c;
END
$$;
