-- picket 0007: task defaults however a job is enqueued, serial queues, cluster-wide task limits.
--
-- 1. max_attempts NULL means "the task's": the claim fills it from the claiming worker's task
--    config (as it writes the task's backoff), so a job enqueued by SQL, the CLI or enqueueJob
--    without maxAttempts gets its task's, not a table default. Once claimed the row holds a value,
--    so the sweep and every later write read the row, never a config. The range check of 0001
--    still holds for a value (a CHECK passes NULL). No check forbids NULL on a processing row: a
--    worker of an older picket claims without filling it during a rolling deploy, and the writes
--    that end an attempt read a NULL as the old table default (DEFAULT_MAX_ATTEMPTS, 5).
ALTER TABLE {{schema}}.jobs ALTER COLUMN max_attempts DROP NOT NULL, ALTER COLUMN max_attempts DROP DEFAULT;

-- 2. A job may name a serial queue: at most the queue's concurrency (default 1) of its jobs are
--    processing at once across every worker. Nothing holds a queue but its processing rows, so a
--    hold ends exactly when the row leaves processing: a fenced write (which changes no row) never
--    releases a queue it no longer holds, and a crashed worker's hold ends when the sweep takes
--    its row back after its lease.
ALTER TABLE {{schema}}.jobs ADD COLUMN queue text CHECK (queue IS NULL OR length(queue) BETWEEN 1 AND 128);

-- The fast claim takes only jobs without a queue: its index leaves queued rows out, so a backlog
-- held behind a busy queue never sits in its range scans.
DROP INDEX {{schema}}.jobs_claim_idx;
CREATE INDEX jobs_claim_idx ON {{schema}}.jobs (type, priority DESC, run_at, id)
  WHERE status = 'pending' AND queue IS NULL;
-- A queue's pending jobs in claim order; also serves the skip scan over the queues with work.
CREATE INDEX jobs_queue_idx ON {{schema}}.jobs (queue, run_at, id)
  WHERE status = 'pending' AND queue IS NOT NULL;
-- A queue's holders. Keyed on the lease (set exactly while processing), not on status, so that
-- no partial index matches the fence's status = 'processing' (see 0002).
CREATE INDEX jobs_queue_held_idx ON {{schema}}.jobs (queue)
  WHERE lock_until IS NOT NULL AND queue IS NOT NULL;

-- 3. The rate limit's log of starts: one row per claim of a rate-limited task, pruned as its
--    window passes. A sliding window: a claim is allowed only while fewer than max starts of the
--    task lie in the window ending at that claim.
CREATE TABLE {{schema}}.job_starts (
  type       text        NOT NULL,
  started_at timestamptz NOT NULL
);
CREATE INDEX job_starts_type_idx ON {{schema}}.job_starts (type, started_at);

-- The claim of queued jobs and of jobs of limited tasks (the slow path). The fast claim statement
-- (src/db/claim.ts) never takes such a job, so every claim that can raise a queue's or a limited
-- task's count of processing rows runs here, one at a time.
--
-- Why one at a time is enough, under READ COMMITTED: the function first takes a transaction-scoped
-- advisory lock, the same key for every worker of this schema. The lock is held until the claim
-- commits, and PostgreSQL makes a commit visible before it releases the transaction's locks. The
-- function is VOLATILE, so each statement after the lock takes a fresh snapshot, which therefore
-- sees every claim committed by earlier holders of the lock. Counts of processing rows can only
-- fall outside the lock (outcomes, releases, the sweep): a count that is stale by such a write is
-- too high, never too low. So when a claim reads "k processing" under the lock, at most k are
-- processing, and it adds at most limit - k. A count inside one statement without the lock is not
-- enough: two claims starting together would read the same snapshot and both see the queue free.
--
-- The rate limit's starts are stamped with clock_timestamp() read after the lock. A claim stamped
-- s counts every recorded start stamped after s - window (later stamps too: no upper bound) and
-- takes at most max minus that many. Take any window [t, t + window) and, of the claims stamped
-- in it, the one that committed last, stamped s >= t: every start of the window committed before
-- it is stamped >= t > s - window, so it was counted, and the window holds at most max starts.
-- The argument needs no order between stamps and commits, so a claim whose transaction began
-- long before it ran is still counted right (test/queues.test.ts).
--
-- Within a queue, jobs are claimed in run_at then id order, a job only when every job before it
-- in that order is claimed too: a head this worker has no handler for (or cannot take now: its
-- task's budget is spent, or another session holds its row) ends the queue's turn. Queues take
-- turns by the age of their heads, oldest first, so no queue starves another by name.
--
-- Every limit is the claiming worker's own config, passed in: workers that disagree each apply
-- their own (see the README).
CREATE FUNCTION {{schema}}.claim_limited(
  p_worker          text,
  p_types           text[],
  p_lims            int[],
  p_lease_ms        int[],
  p_backoff_base_ms int[],
  p_backoff_max_ms  int[],
  p_max_attempts    int[],
  p_cluster         int[],   -- most processing of the type across workers; NULL: no limit
  p_rate_max        int[],   -- most starts of the type per window; NULL: no rate limit
  p_rate_window_ms  int[],
  p_queue_names     text[],  -- queues with a configured concurrency
  p_queue_lims      int[],
  p_queue_default   int,     -- every other queue's concurrency
  p_total           int,
  p_tokens          uuid[]
) RETURNS TABLE (
  o_id bigint, o_type text, o_payload jsonb, o_attempts int, o_max_attempts int, o_created_at timestamptz,
  o_claim_token uuid, o_lease_ms int, o_ready_ms float8, o_queue text
)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  n_types   int := coalesce(array_length(p_types, 1), 0);
  budget    int[] := p_lims;
  picked    bigint[] := '{}';
  picked_at int[] := '{}';
  taken     int := 0;
  stamp     timestamptz;
  counted   int;
  room      int;
  i         int;
  q         record;
  r         record;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended('picket.claim_limited:{{schema}}', 0));
  stamp := clock_timestamp();

  -- Each type's budget: the worker's free slots for it, less what its cluster-wide limits leave.
  FOR i IN 1 .. n_types LOOP
    IF p_cluster[i] IS NOT NULL THEN
      SELECT count(*) INTO counted FROM {{schema}}.jobs AS j
      WHERE j.lock_until IS NOT NULL AND j.status = 'processing' AND j.type = p_types[i];
      budget[i] := least(budget[i], greatest(p_cluster[i] - counted, 0));
    END IF;
    IF p_rate_max[i] IS NOT NULL THEN
      DELETE FROM {{schema}}.job_starts AS s
      WHERE s.type = p_types[i] AND s.started_at <= stamp - p_rate_window_ms[i] * interval '1 millisecond';
      SELECT count(*) INTO counted FROM {{schema}}.job_starts AS s
      WHERE s.type = p_types[i] AND s.started_at > stamp - p_rate_window_ms[i] * interval '1 millisecond';
      budget[i] := least(budget[i], greatest(p_rate_max[i] - counted, 0));
    END IF;
  END LOOP;

  -- Queued jobs, queue by queue, oldest head first. The queues with pending work are found by a
  -- skip scan of jobs_queue_idx: one index probe per queue, however deep each backlog.
  FOR q IN
    WITH RECURSIVE queues AS (
      (SELECT j.queue FROM {{schema}}.jobs AS j
       WHERE j.status = 'pending' AND j.queue IS NOT NULL ORDER BY j.queue LIMIT 1)
      UNION ALL
      SELECT (SELECT j.queue FROM {{schema}}.jobs AS j
              WHERE j.status = 'pending' AND j.queue IS NOT NULL AND j.queue > queues.queue ORDER BY j.queue LIMIT 1)
      FROM queues WHERE queues.queue IS NOT NULL
    )
    SELECT queues.queue, head.run_at, head.id
    FROM queues
    CROSS JOIN LATERAL (
      SELECT j.run_at, j.id FROM {{schema}}.jobs AS j
      WHERE j.status = 'pending' AND j.queue = queues.queue ORDER BY j.run_at, j.id LIMIT 1
    ) AS head
    WHERE queues.queue IS NOT NULL AND head.run_at <= stamp
    ORDER BY head.run_at, head.id
  LOOP
    EXIT WHEN taken >= p_total;
    SELECT count(*) INTO counted FROM {{schema}}.jobs AS j
    WHERE j.lock_until IS NOT NULL AND j.queue = q.queue AND j.status = 'processing';
    room := coalesce(p_queue_lims[array_position(p_queue_names, q.queue)], p_queue_default) - counted;
    CONTINUE WHEN room <= 0;
    FOR r IN
      SELECT j.id, j.type FROM {{schema}}.jobs AS j
      WHERE j.status = 'pending' AND j.queue = q.queue AND j.run_at <= stamp
      ORDER BY j.run_at, j.id LIMIT room
    LOOP
      i := array_position(p_types, r.type);
      EXIT WHEN i IS NULL OR budget[i] <= 0 OR taken >= p_total;
      -- Re-checked on the newest row version; a row another session holds ends the queue's turn.
      PERFORM 1 FROM {{schema}}.jobs AS j WHERE j.id = r.id AND j.status = 'pending' FOR UPDATE SKIP LOCKED;
      EXIT WHEN NOT FOUND;
      picked := picked || r.id;
      picked_at := picked_at || i;
      budget[i] := budget[i] - 1;
      taken := taken + 1;
    END LOOP;
  END LOOP;

  -- Jobs of limited tasks that name no queue, in the fast claim's order.
  FOR i IN 1 .. n_types LOOP
    EXIT WHEN taken >= p_total;
    CONTINUE WHEN (p_cluster[i] IS NULL AND p_rate_max[i] IS NULL) OR budget[i] <= 0;
    FOR r IN
      SELECT j.id FROM {{schema}}.jobs AS j
      WHERE j.status = 'pending' AND j.queue IS NULL AND j.type = p_types[i] AND j.run_at <= stamp
      ORDER BY j.priority DESC, j.run_at, j.id
      LIMIT least(budget[i], p_total - taken)
      FOR UPDATE SKIP LOCKED
    LOOP
      picked := picked || r.id;
      picked_at := picked_at || i;
      budget[i] := budget[i] - 1;
      taken := taken + 1;
    END LOOP;
  END LOOP;

  IF taken = 0 THEN
    RETURN;
  END IF;

  -- Every picked row is locked by this transaction, so each is written.
  INSERT INTO {{schema}}.job_starts (type, started_at)
  SELECT p_types[p.at], stamp FROM unnest(picked_at) AS p(at) WHERE p_rate_max[p.at] IS NOT NULL;

  RETURN QUERY
  WITH p AS (
    SELECT * FROM unnest(picked, picked_at) WITH ORDINALITY AS p(id, at, slot)
  ), claimed AS (
    UPDATE {{schema}}.jobs AS j
    SET status = 'processing',
        claim_token = p_tokens[p.slot],
        locked_by = p_worker,
        -- The moment the claim began to count (after the lock): the rate limit's stamp, so the
        -- row shows when its start counted.
        locked_at = stamp,
        lock_until = clock_timestamp() + p_lease_ms[p.at] * interval '1 millisecond',
        backoff_base_ms = p_backoff_base_ms[p.at],
        backoff_max_ms = p_backoff_max_ms[p.at],
        max_attempts = coalesce(j.max_attempts, p_max_attempts[p.at]),
        attempts = j.attempts + 1,
        progress = NULL,
        updated_at = now()
    FROM p
    WHERE j.id = p.id AND j.status = 'pending'
    RETURNING j.id, j.type, j.payload, j.attempts, j.max_attempts, j.created_at, j.claim_token,
              p_lease_ms[p.at] AS lease_ms, (extract(epoch FROM stamp - j.run_at) * 1000)::float8 AS ready_ms, j.queue, p.slot
  )
  SELECT c.id, c.type, c.payload, c.attempts, c.max_attempts, c.created_at, c.claim_token, c.lease_ms, c.ready_ms, c.queue
  FROM claimed AS c ORDER BY c.slot;
END
$$;

-- Enqueue from SQL with the same rules as the library: max_attempts NULL (the default) means the
-- task's, and a job may name a queue. Replaced, not overloaded: a second add_job with one more
-- defaulted parameter would make every existing call ambiguous.
DROP FUNCTION {{schema}}.add_job(text, jsonb, timestamptz, integer, integer, text);
CREATE FUNCTION {{schema}}.add_job(
  job_type     text,
  payload      jsonb       DEFAULT '{}'::jsonb,
  run_at       timestamptz DEFAULT NULL,
  priority     integer     DEFAULT 0,
  max_attempts integer     DEFAULT NULL,
  job_key      text        DEFAULT NULL,
  job_queue    text        DEFAULT NULL
) RETURNS {{schema}}.jobs
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  job {{schema}}.jobs;
BEGIN
  IF octet_length(payload::text) > 1048576 THEN
    RAISE EXCEPTION 'picket: payload of job type % is % bytes; the limit is 1048576 bytes',
      job_type, octet_length(payload::text)
      USING HINT = 'Store large data elsewhere and put a reference in the payload.';
  END IF;
  INSERT INTO {{schema}}.jobs AS j (type, payload, run_at, priority, max_attempts, key, queue)
  VALUES (job_type, coalesce(payload, '{}'::jsonb), coalesce(run_at, now()), priority, max_attempts, job_key, job_queue)
  ON CONFLICT (key) WHERE key IS NOT NULL AND status IN ('pending', 'processing') DO NOTHING
  RETURNING * INTO job;
  IF job.id IS NULL THEN
    SELECT * INTO job FROM {{schema}}.jobs j
    WHERE j.key = job_key AND j.status IN ('pending', 'processing');
  END IF;
  RETURN job;
END
$$;

-- The wake-up names the ready types as before, and adds '!queued' when any of them names a queue
-- ('!' is not allowed in a task name), so workers run the slow claim at once rather than at their
-- next probe. Past the size limit, '*' still means "anything may be ready".
CREATE OR REPLACE FUNCTION {{schema}}.notify_jobs() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
  ready  text;
  queued boolean;
BEGIN
  SELECT string_agg(DISTINCT type, ','), bool_or(queue IS NOT NULL) INTO ready, queued FROM new_jobs WHERE run_at <= now();
  IF ready IS NOT NULL THEN
    IF queued THEN
      ready := ready || ',!queued';
    END IF;
    IF octet_length(ready) >= 8000 THEN
      ready := '*';
    END IF;
    PERFORM pg_notify('picket:' || TG_TABLE_SCHEMA, ready);
  END IF;
  RETURN NULL;
END
$$;
