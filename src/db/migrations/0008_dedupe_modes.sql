-- picket 0008: dedupe modes. Besides "live" (0001: while a job with the key is pending or
-- processing, return it), a keyed enqueue may ask for
--   replace: the pending job with the key takes the new spec (type, payload, run time, queue, and
--            priority and max attempts when given; its attempts start again). While the key's job is
--            processing, the key moves: that row's key is set to NULL and the spec is inserted as a
--            new pending job holding the key. The running job carries on under its claim (the
--            fence matches id, claim token and status, never the key), so its outcome is still
--            recorded; the new job may start while it runs.
--   window:  as live, and also while a job with the key completed within the window (database
--            clock). Dead and cancelled jobs do not hold the key: they did not do the work, and
--            holding it would drop the caller's job silently for the rest of the window.
-- The unique index on live keys (0001) stays the only rule for "live", so enqueuers of older
-- picket versions, and "live" enqueues of this one, keep their exact behaviour and statements.
-- Nothing here is on a worker's path: no trigger, no lock a worker takes.

-- Serves the window's look-up: the newest completed job with a key.
CREATE INDEX jobs_completed_key_idx ON {{schema}}.jobs (key, finished_at)
  WHERE key IS NOT NULL AND status = 'completed';

-- Serialises the enqueues of one key in one mode, until the end of their transaction. Only
-- enqueuers take it (add_job below). Advisory locks are database-wide, so the two-int form is used
-- (a space apart from single-bigint users), with the class naming picket's schema and the mode; a
-- hash collision between two keys only makes them take turns.
CREATE FUNCTION {{schema}}.lock_key(mode text, job_key text) RETURNS void
LANGUAGE sql VOLATILE
AS $$
  SELECT pg_advisory_xact_lock(hashtext('picket:{{schema}}:' || mode), hashtext(job_key))
$$;

-- The pending job with the key takes the spec; without one, the spec is inserted as a new job
-- holding the key, taken from a processing job if one holds it. Returns NULL when the key's holder
-- changed between the two statements (a "live" enqueue inserted one, or the running job went back
-- to pending): the caller tries again.
--
-- Moving the key writes one column of the processing row, key, and nothing else: its claim columns,
-- status and lease stay its worker's, and the worker's fenced writes (id, claim token, status) still
-- match it. The UPDATE takes the row's lock: if a worker's write holds it, that is for one statement
-- (fenced writes lock and write in one), and the UPDATE then re-checks the row's newest version, so
-- a job that finished or went back to pending meanwhile keeps its key (finished: the key is free
-- anyway; pending: the INSERT conflicts, NULL is returned, and the next round replaces it). The wait
-- is bounded like every picket statement. Workers never wait for this lock: they skip a locked row
-- and report it busy.
-- The move and the insert are one statement: the INSERT reads the UPDATE's result (an aggregate, so
-- the UPDATE has run to its end first), and its conflict check sees the old row's index entry as
-- deleted by this transaction, so the new job takes the key.
CREATE FUNCTION {{schema}}.put_replacing(
  job_type text, payload jsonb, run_at timestamptz, priority integer, max_attempts integer, job_key text, job_queue text
) RETURNS {{schema}}.jobs
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  job {{schema}}.jobs;
BEGIN
  UPDATE {{schema}}.jobs AS j
  SET type = job_type, payload = put_replacing.payload, run_at = put_replacing.run_at,
      priority = coalesce(put_replacing.priority, j.priority),
      max_attempts = coalesce(put_replacing.max_attempts, j.max_attempts), queue = job_queue,
      -- New work: a failed attempt of the old spec does not count against the new one.
      attempts = 0, last_error = NULL, updated_at = now()
  WHERE j.key = job_key AND j.status = 'pending'
  RETURNING j.* INTO job;
  IF job.id IS NOT NULL THEN
    -- The insert trigger's NOTIFY does not fire for an UPDATE; a job made ready now wakes workers
    -- (with '!queued' for a queued job, as notify_jobs of 0007 says it, so workers run the slow claim).
    IF job.run_at <= now() THEN
      PERFORM pg_notify('picket:{{schema}}', job.type || CASE WHEN job.queue IS NOT NULL THEN ',!queued' ELSE '' END);
    END IF;
    RETURN job;
  END IF;
  WITH moved AS (
    UPDATE {{schema}}.jobs AS r SET key = NULL
    WHERE r.key = job_key AND r.status = 'processing'
    RETURNING r.id
  )
  INSERT INTO {{schema}}.jobs AS j (type, payload, run_at, priority, max_attempts, key, queue)
  SELECT job_type, put_replacing.payload, put_replacing.run_at, coalesce(put_replacing.priority, 0),
         put_replacing.max_attempts, job_key, job_queue
  FROM (SELECT count(*) FROM moved) AS m
  ON CONFLICT (key) WHERE key IS NOT NULL AND status IN ('pending', 'processing') DO NOTHING
  RETURNING j.* INTO job;
  RETURN job;
END
$$;

-- add_job gains the modes. Its earlier signature is dropped (a second overload would make every
-- existing call ambiguous); every earlier call, positional or named, means what it meant.
-- priority now defaults to NULL, "not given" (as max_attempts does since 0007): a new job gets 0
-- and its task's attempts as before; a replaced one keeps its own.
DROP FUNCTION {{schema}}.add_job(text, jsonb, timestamptz, integer, integer, text, text);

CREATE FUNCTION {{schema}}.add_job(
  job_type      text,
  payload       jsonb       DEFAULT '{}'::jsonb,
  run_at        timestamptz DEFAULT NULL,
  priority      integer     DEFAULT NULL,
  max_attempts  integer     DEFAULT NULL,
  job_key       text        DEFAULT NULL,
  job_queue     text        DEFAULT NULL,
  dedupe        text        DEFAULT 'live',
  dedupe_window interval    DEFAULT NULL
) RETURNS {{schema}}.jobs
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  job {{schema}}.jobs;
  body jsonb := coalesce(add_job.payload, '{}'::jsonb);
  start_at timestamptz := coalesce(add_job.run_at, now());
BEGIN
  IF octet_length(body::text) > 1048576 THEN
    RAISE EXCEPTION 'picket: payload of job type % is % bytes; the limit is 1048576 bytes',
      job_type, octet_length(body::text)
      USING HINT = 'Store large data elsewhere and put a reference in the payload.';
  END IF;
  IF dedupe IS NULL OR dedupe NOT IN ('live', 'replace', 'window') THEN
    RAISE EXCEPTION 'picket: dedupe must be ''live'', ''replace'' or ''window'' (got %)', coalesce(quote_literal(dedupe), 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF dedupe <> 'live' AND job_key IS NULL THEN
    RAISE EXCEPTION 'picket: dedupe ''%'' needs a job_key: it decides what happens to another job with the same key', dedupe
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF dedupe = 'window' AND (dedupe_window IS NULL OR dedupe_window <= interval '0') THEN
    RAISE EXCEPTION 'picket: dedupe ''window'' needs a positive dedupe_window, e.g. interval ''10 minutes'' (got %)', coalesce(dedupe_window::text, 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF dedupe <> 'window' AND dedupe_window IS NOT NULL THEN
    RAISE EXCEPTION 'picket: dedupe_window applies only with dedupe => ''window'' (got dedupe ''%'')', dedupe
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- Both modes rely on each statement below seeing what an earlier holder of the key's lock
  -- committed. A REPEATABLE READ or SERIALIZABLE transaction reads one snapshot taken before the
  -- lock was granted, and could create a second job: refused rather than silently wrong.
  IF dedupe <> 'live' AND current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'picket: dedupe ''%'' needs a READ COMMITTED transaction (this one is %)', dedupe, current_setting('transaction_isolation')
      USING ERRCODE = 'invalid_transaction_state',
            HINT = 'Enqueue with dedupe ''replace'' or a window outside the transaction, or in a READ COMMITTED one.';
  END IF;

  IF dedupe = 'replace' THEN
    PERFORM {{schema}}.lock_key('replace', job_key);
    -- Under the lock no other replace of the key runs, but a "live" enqueue, a claim or a finishing
    -- job may change the key's job between two statements: each round reads afresh.
    FOR round IN 1..3 LOOP
      job := {{schema}}.put_replacing(job_type, body, start_at, add_job.priority, add_job.max_attempts, job_key, job_queue);
      IF job.id IS NOT NULL THEN
        RETURN job;
      END IF;
    END LOOP;
    RAISE EXCEPTION 'picket: job % with key % changed hands too often to be replaced; retry the enqueue', job_type, job_key
      USING ERRCODE = 'serialization_failure';
  END IF;

  IF dedupe = 'window' THEN
    -- Why two concurrent window enqueues of a key create at most one job: each takes the key's
    -- window lock first and keeps it until its transaction ends, and each statement below takes
    -- its snapshot after the lock was granted, so it sees the job the previous holder created (or
    -- nothing, if that one rolled back). A "live" enqueue does not take the lock; the unique index
    -- on live keys settles that race, as for "live" alone.
    PERFORM {{schema}}.lock_key('window', job_key);
    SELECT * INTO job FROM {{schema}}.jobs AS j
    WHERE j.key = job_key AND j.status IN ('pending', 'processing');
    IF job.id IS NOT NULL THEN
      RETURN job;
    END IF;
    SELECT * INTO job FROM {{schema}}.jobs AS j
    WHERE j.key = job_key AND j.status = 'completed' AND j.finished_at > now() - dedupe_window
    ORDER BY j.finished_at DESC
    LIMIT 1;
    IF job.id IS NOT NULL THEN
      RETURN job;
    END IF;
  END IF;

  -- live (and window past its checks): insert unless a live job holds the key, else return it.
  -- The holder can finish between the two statements, freeing the key: try again (bounded).
  FOR round IN 1..3 LOOP
    INSERT INTO {{schema}}.jobs AS j (type, payload, run_at, priority, max_attempts, key, queue)
    VALUES (job_type, body, start_at, coalesce(add_job.priority, 0), add_job.max_attempts, job_key, job_queue)
    ON CONFLICT (key) WHERE key IS NOT NULL AND status IN ('pending', 'processing') DO NOTHING
    RETURNING j.* INTO job;
    IF job.id IS NOT NULL THEN
      RETURN job;
    END IF;
    SELECT * INTO job FROM {{schema}}.jobs AS j
    WHERE j.key = job_key AND j.status IN ('pending', 'processing');
    IF job.id IS NOT NULL THEN
      RETURN job;
    END IF;
  END LOOP;
  RAISE EXCEPTION 'picket: job % with key % changed hands too often to be enqueued; retry the enqueue', job_type, job_key
    USING ERRCODE = 'serialization_failure';
END
$$;
