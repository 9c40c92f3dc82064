-- picket 0008: dedupe modes. Besides "live" (0001: while a job with the key is pending or
-- processing, return it), a keyed enqueue may ask for
--   replace: the pending job with the key takes the new spec (type, payload, run time, and priority
--            and max attempts when given; its attempts start again). While the key's job is
--            processing, the spec waits as the key's successor and becomes its pending job the
--            moment the running one leaves processing (finished, retried, released or reclaimed).
--            A processing row is never written by an enqueue: its claim and its fence are the
--            worker's alone.
--   window:  as live, and also while a job with the key completed within the window (database
--            clock). Dead and cancelled jobs do not hold the key: they did not do the work, and
--            holding it would drop the caller's job silently for the rest of the window.
-- The unique index on live keys (0001) stays the only rule for "live", so enqueuers of older
-- picket versions, and "live" enqueues of this one, keep their exact behaviour and statements.

-- Serves the window's look-up: the newest completed job with a key.
CREATE INDEX jobs_completed_key_idx ON {{schema}}.jobs (key, finished_at)
  WHERE key IS NOT NULL AND status = 'completed';

-- A replace that found the key's job processing: the spec that job's end hands the key to. One per
-- key (a later replace overwrites it: the newest spec wins, as with a pending job). The checks copy
-- the job table's, so a spec that could not become a job is refused by the enqueue that asked,
-- never by the worker whose write would apply it.
CREATE TABLE {{schema}}.key_successors (
  key          text        PRIMARY KEY CHECK (length(key) BETWEEN 1 AND 512),
  type         text        NOT NULL CHECK (length(type) BETWEEN 1 AND 128),
  payload      jsonb       NOT NULL,
  run_at       timestamptz NOT NULL,
  priority     integer     CHECK (priority BETWEEN -1000 AND 1000),
  max_attempts integer     CHECK (max_attempts BETWEEN 1 AND 1000000),
  -- The processing job it waits for (for an operator's eyes; the key is what links them).
  waits_for    bigint      NOT NULL,
  created_at   timestamptz NOT NULL DEFAULT now()
);

-- Serialises the enqueues of one key in one mode, until the end of their transaction. Advisory
-- locks are database-wide, so the two-int form is used (a space apart from single-bigint users),
-- with the class naming picket's schema and the mode; a hash collision between two keys only
-- makes them take turns. Workers take the replace lock shared (below), so they never wait for
-- each other, only for a replace of the same key in flight.
CREATE FUNCTION {{schema}}.lock_key(mode text, job_key text) RETURNS void
LANGUAGE sql VOLATILE
AS $$
  SELECT pg_advisory_xact_lock(hashtext('picket:{{schema}}:' || mode), hashtext(job_key))
$$;

-- The pending job with the key takes the spec; without one, the spec is inserted. Returns NULL
-- when neither can be done because the key's job is processing (never written here: the UPDATE
-- names status = 'pending', and re-checks it on the newest row version after waiting for a claim
-- in flight, so a job claimed meanwhile is left alone).
CREATE FUNCTION {{schema}}.put_replacing(
  job_type text, payload jsonb, run_at timestamptz, priority integer, max_attempts integer, job_key text
) RETURNS {{schema}}.jobs
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  job {{schema}}.jobs;
BEGIN
  UPDATE {{schema}}.jobs AS j
  SET type = job_type, payload = put_replacing.payload, run_at = put_replacing.run_at,
      priority = coalesce(put_replacing.priority, j.priority),
      max_attempts = coalesce(put_replacing.max_attempts, j.max_attempts),
      -- New work: a failed attempt of the old spec does not count against the new one.
      attempts = 0, last_error = NULL, updated_at = now()
  WHERE j.key = job_key AND j.status = 'pending'
  RETURNING j.* INTO job;
  IF job.id IS NOT NULL THEN
    -- The insert trigger's NOTIFY does not fire for an UPDATE; a job made ready now wakes workers.
    IF job.run_at <= now() THEN
      PERFORM pg_notify('picket:{{schema}}', job.type);
    END IF;
    RETURN job;
  END IF;
  INSERT INTO {{schema}}.jobs AS j (type, payload, run_at, priority, max_attempts, key)
  VALUES (job_type, put_replacing.payload, put_replacing.run_at, coalesce(put_replacing.priority, 0),
          coalesce(put_replacing.max_attempts, 5), job_key)
  ON CONFLICT (key) WHERE key IS NOT NULL AND status IN ('pending', 'processing') DO NOTHING
  RETURNING j.* INTO job;
  RETURN job;
END
$$;

-- A keyed job leaving processing hands its key to the successor a replace left for it.
--
-- Why no successor is ever left behind: a replace takes lock_key('replace', key) before it reads
-- the key's job and holds it until its transaction ends; the worker's write takes the same lock
-- (shared) in a BEFORE trigger, before the row changes, and holds it until its commit; the AFTER
-- trigger then reads the successor. Under READ COMMITTED every statement in a PL/pgSQL function
-- takes a new snapshot, so whichever comes second sees what the first committed:
--   - the replace first: the worker's write waits for its commit, then reads the successor it left;
--   - the worker first: the replace waits for the worker's commit, then finds the key's job no
--     longer processing (pending, which it replaces, or finished, so it inserts), and leaves none.
-- The lock is taken before the row changes because a replace, holding the lock, may itself wait
-- for the worker: its INSERT waits on a live-key row that an open transaction has updated. Had the
-- worker updated the row first and then asked for the lock, each would wait for the other.
-- The wait is the cost: a worker's outcome write for a keyed job waits while a replace of the same
-- key is in an open transaction (bounded by the worker's lock_timeout; the write is retried). The
-- WHEN clauses keep both triggers to keyed rows leaving processing; other rows never wait.
-- lock_key's lock for 'replace', taken shared, written out: this runs for every keyed job a
-- worker finishes.
CREATE FUNCTION {{schema}}.lock_key_for_successor() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
  PERFORM pg_advisory_xact_lock_shared(hashtext('picket:{{schema}}:replace'), hashtext(NEW.key));
  RETURN NEW;
END
$$;

CREATE FUNCTION {{schema}}.hand_key_to_successor() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
  successor {{schema}}.key_successors;
BEGIN
  SELECT * INTO successor FROM {{schema}}.key_successors AS s WHERE s.key = NEW.key;
  IF successor.key IS NULL THEN
    RETURN NULL;
  END IF;
  -- A subtransaction only when there is a successor (rare), so a batch finishing many keyed jobs
  -- opens none. If the successor cannot be applied the worker's write still succeeds (the outcome
  -- is the work's; it must not be lost to bookkeeping) and the successor stays for an operator.
  BEGIN
    DELETE FROM {{schema}}.key_successors AS s WHERE s.key = successor.key;
    IF ({{schema}}.put_replacing(successor.type, successor.payload, successor.run_at, successor.priority, successor.max_attempts, successor.key)).id IS NULL THEN
      RAISE EXCEPTION 'the key is held by another processing job';
    END IF;
  EXCEPTION WHEN OTHERS THEN
    RAISE WARNING 'picket: the job waiting for key % could not be enqueued (%); it stays in %.key_successors',
      successor.key, SQLERRM, '{{schema}}';
  END;
  RETURN NULL;
END
$$;

CREATE TRIGGER jobs_key_successor_lock BEFORE UPDATE OF status ON {{schema}}.jobs
  FOR EACH ROW
  WHEN (OLD.status = 'processing' AND NEW.status <> 'processing' AND OLD.key IS NOT NULL)
  EXECUTE FUNCTION {{schema}}.lock_key_for_successor();

CREATE TRIGGER jobs_key_successor AFTER UPDATE OF status ON {{schema}}.jobs
  FOR EACH ROW
  WHEN (OLD.status = 'processing' AND NEW.status <> 'processing' AND OLD.key IS NOT NULL)
  EXECUTE FUNCTION {{schema}}.hand_key_to_successor();

-- add_job gains the modes. Its earlier signature is dropped (a second overload would make every
-- existing call ambiguous); every earlier call, positional or named, means what it meant.
-- priority and max_attempts now default to NULL, "not given": a new job gets 0 and 5 as before, a
-- replaced one keeps its own.
DROP FUNCTION {{schema}}.add_job(text, jsonb, timestamptz, integer, integer, text);

CREATE FUNCTION {{schema}}.add_job(
  job_type      text,
  payload       jsonb       DEFAULT '{}'::jsonb,
  run_at        timestamptz DEFAULT NULL,
  priority      integer     DEFAULT NULL,
  max_attempts  integer     DEFAULT NULL,
  job_key       text        DEFAULT NULL,
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
      job := {{schema}}.put_replacing(job_type, body, start_at, add_job.priority, add_job.max_attempts, job_key);
      IF job.id IS NOT NULL THEN
        RETURN job;
      END IF;
      SELECT * INTO job FROM {{schema}}.jobs AS j WHERE j.key = job_key AND j.status = 'processing';
      IF job.id IS NOT NULL THEN
        -- Checked as a job would be, so a bad spec fails here and not in the worker's write.
        INSERT INTO {{schema}}.key_successors AS s (key, type, payload, run_at, priority, max_attempts, waits_for)
        VALUES (job_key, job_type, body, start_at, add_job.priority, add_job.max_attempts, job.id)
        ON CONFLICT (key) DO UPDATE
          SET type = excluded.type, payload = excluded.payload, run_at = excluded.run_at, priority = excluded.priority,
              max_attempts = excluded.max_attempts, waits_for = excluded.waits_for, created_at = now();
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
    INSERT INTO {{schema}}.jobs AS j (type, payload, run_at, priority, max_attempts, key)
    VALUES (job_type, body, start_at, coalesce(add_job.priority, 0), coalesce(add_job.max_attempts, 5), job_key)
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
