-- picket 0001: the job table, its indexes, the backoff, the error history and enqueue from SQL.
-- {{schema}} is replaced by the configured schema name (a validated identifier) before this runs.
-- Released migrations are never edited: the runner refuses a file whose checksum changed.

CREATE TABLE {{schema}}.jobs (
  id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  type            text        NOT NULL CHECK (length(type) BETWEEN 1 AND 128),
  payload         jsonb       NOT NULL DEFAULT '{}'::jsonb,
  status          text        NOT NULL DEFAULT 'pending'
                  CHECK (status IN ('pending', 'processing', 'completed', 'dead', 'cancelled')),
  priority        integer     NOT NULL DEFAULT 0 CHECK (priority BETWEEN -1000 AND 1000),
  run_at          timestamptz NOT NULL DEFAULT now(),
  attempts        integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
  max_attempts    integer     NOT NULL DEFAULT 5 CHECK (max_attempts BETWEEN 1 AND 1000000),
  -- The claim. Written together by the claim statement, cleared when the row leaves processing
  -- for pending; kept on finished rows so an operator can see which claim wrote the outcome.
  claim_token     uuid,
  locked_by       text,
  locked_at       timestamptz,
  lock_until      timestamptz,
  -- The retry spacing of the claiming worker's task, written at claim so that the sweep, run by
  -- any worker with any configuration, spaces a lost attempt exactly as the owner would have.
  backoff_base_ms integer     NOT NULL DEFAULT 1000 CHECK (backoff_base_ms >= 0),
  backoff_max_ms  integer     NOT NULL DEFAULT 3600000 CHECK (backoff_max_ms >= 0),
  progress        jsonb,
  last_error      text,
  errors          jsonb       NOT NULL DEFAULT '[]'::jsonb,
  result          jsonb,
  key             text        CHECK (key IS NULL OR length(key) BETWEEN 1 AND 512),
  created_at      timestamptz NOT NULL DEFAULT now(),
  updated_at      timestamptz NOT NULL DEFAULT now(),
  finished_at     timestamptz,
  CONSTRAINT processing_has_claim CHECK (
    status <> 'processing' OR (claim_token IS NOT NULL AND lock_until IS NOT NULL)
  )
);

-- Serves the claim: one range scan per type, already in claim order.
CREATE INDEX jobs_claim_idx ON {{schema}}.jobs (type, priority DESC, run_at, id)
  WHERE status = 'pending';

-- Serves the reclaim sweep: lock_until < now() over processing rows only.
CREATE INDEX jobs_sweep_idx ON {{schema}}.jobs (lock_until)
  WHERE status = 'processing';

-- Serves retention: finished rows by age.
CREATE INDEX jobs_finished_idx ON {{schema}}.jobs (finished_at)
  WHERE status IN ('completed', 'dead', 'cancelled');

-- The dedupe key is unique among live jobs only: once a job finishes its key can be used again.
CREATE UNIQUE INDEX jobs_live_key_idx ON {{schema}}.jobs (key)
  WHERE key IS NOT NULL AND status IN ('pending', 'processing');

-- The one backoff. Every path that means "this attempt did not finish" (handler error, timeout,
-- a lost worker found by the sweep) calls it with the row's own attempts and spacing.
-- raw = min(ceiling, base * 2^(attempt-1)); the exponent is clamped so absurd attempt counts
-- cannot overflow float8; the delay is drawn uniformly from [raw/2, raw], so it never exceeds
-- the ceiling and spreads a thundering herd of retries over half the window.
CREATE FUNCTION {{schema}}.backoff_ms(attempt integer, base_ms integer, max_ms integer, jitter double precision)
RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
  SELECT least(max_ms::double precision,
               base_ms::double precision * power(2::double precision, least(greatest(attempt, 1), 64) - 1))
         -- jitter below 1e-9 counts as 0: a denormal would underflow float8 (found by a property test)
         * (1 - 0.5 * CASE WHEN jitter >= 1e-9 THEN least(jitter, 1) ELSE 0 END)
$$;

CREATE FUNCTION {{schema}}.backoff(attempt integer, base_ms integer, max_ms integer)
RETURNS interval
LANGUAGE sql VOLATILE
AS $$
  SELECT make_interval(secs => {{schema}}.backoff_ms(attempt, base_ms, max_ms, random()) / 1000)
$$;

-- Appends one entry to a bounded error history, dropping the oldest entries beyond keep.
CREATE FUNCTION {{schema}}.append_error(history jsonb, entry jsonb, keep integer)
RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
  SELECT coalesce(jsonb_agg(e ORDER BY n), '[]'::jsonb)
  FROM jsonb_array_elements(coalesce(history, '[]'::jsonb) || jsonb_build_array(entry))
       WITH ORDINALITY AS h(e, n)
  WHERE n > jsonb_array_length(coalesce(history, '[]'::jsonb)) + 1 - keep
$$;

-- One NOTIFY per enqueueing statement, delivered at commit, naming the types that arrived,
-- so idle workers pick new work up at once. Covers the library, the SQL function and raw INSERTs.
CREATE FUNCTION {{schema}}.notify_jobs() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
  ready text;
BEGIN
  SELECT string_agg(DISTINCT type, ',') INTO ready FROM new_jobs WHERE run_at <= now();
  IF ready IS NOT NULL THEN
    PERFORM pg_notify('picket:' || TG_TABLE_SCHEMA, ready);
  END IF;
  RETURN NULL;
END
$$;

CREATE TRIGGER jobs_notify AFTER INSERT ON {{schema}}.jobs
  REFERENCING NEW TABLE AS new_jobs
  FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.notify_jobs();

-- Enqueue from SQL or from a trigger, with the same rules as the library: a live job with the
-- same key is returned instead of a new one.
CREATE FUNCTION {{schema}}.add_job(
  job_type     text,
  payload      jsonb       DEFAULT '{}'::jsonb,
  run_at       timestamptz DEFAULT NULL,
  priority     integer     DEFAULT 0,
  max_attempts integer     DEFAULT 5,
  job_key      text        DEFAULT NULL
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
  INSERT INTO {{schema}}.jobs AS j (type, payload, run_at, priority, max_attempts, key)
  VALUES (job_type, coalesce(payload, '{}'::jsonb), coalesce(run_at, now()), priority, max_attempts, job_key)
  ON CONFLICT (key) WHERE key IS NOT NULL AND status IN ('pending', 'processing') DO NOTHING
  RETURNING * INTO job;
  IF job.id IS NULL THEN
    SELECT * INTO job FROM {{schema}}.jobs j
    WHERE j.key = job_key AND j.status IN ('pending', 'processing');
  END IF;
  RETURN job;
END
$$;
