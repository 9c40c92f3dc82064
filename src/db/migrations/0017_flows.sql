-- picket 0017: flows, jobs that wait for other jobs.
--
-- A flow is a set of jobs enqueued together, with dependencies between them (a DAG); a running job
-- may add children, which its own next run then waits for. A job with dependencies is 'waiting'
-- until they have resolved, then 'pending' like any other job. Whether it may go is decided by the
-- statement that finishes its last dependency (a trigger on that very statement, below): no poll,
-- no scanner, and exactly one transition to pending however completions interleave.

-- The flow itself. Its counts move with its jobs, in the statement that moves them, so its status
-- and finished_at are exact without reading its jobs: 'running' while any job is live (pending,
-- processing or waiting), then 'completed' (all completed), 'failed' (some dead) or 'cancelled'.
CREATE TABLE {{schema}}.flows (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  name        text        NOT NULL CHECK (length(name) BETWEEN 1 AND 128),
  -- A flow's dedupe key: one unfinished flow holds a key at a time.
  key         text        CHECK (key IS NULL OR length(key) BETWEEN 1 AND 512),
  status      text        NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'completed', 'failed', 'cancelled')),
  total       integer     NOT NULL DEFAULT 0 CHECK (total >= 0),
  live        integer     NOT NULL DEFAULT 0 CHECK (live >= 0),
  dead        integer     NOT NULL DEFAULT 0 CHECK (dead >= 0),
  cancelled   integer     NOT NULL DEFAULT 0 CHECK (cancelled >= 0),
  created_at  timestamptz NOT NULL DEFAULT now(),
  finished_at timestamptz
);
CREATE UNIQUE INDEX flows_live_key_idx ON {{schema}}.flows (key) WHERE key IS NOT NULL AND status = 'running';
CREATE INDEX flows_finished_idx ON {{schema}}.flows (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX flows_status_idx ON {{schema}}.flows (status, id);

-- A job's place in its flow: the flow, and the job's name in it (unique within the flow). No
-- foreign key: its check would run on every insert of any job; retention removes a flow's jobs
-- and then the flow, in one statement.
ALTER TABLE {{schema}}.jobs
  ADD COLUMN flow_id bigint,
  ADD COLUMN flow_node text CHECK (flow_node IS NULL OR length(flow_node) BETWEEN 1 AND 128);
CREATE UNIQUE INDEX jobs_flow_idx ON {{schema}}.jobs (flow_id, flow_node) WHERE flow_id IS NOT NULL;

-- 'waiting': not claimable, its dependencies not all resolved.
ALTER TABLE {{schema}}.jobs DROP CONSTRAINT jobs_status_check;
ALTER TABLE {{schema}}.jobs ADD CONSTRAINT jobs_status_check
  CHECK (status IN ('pending', 'processing', 'waiting', 'completed', 'dead', 'cancelled')) NOT VALID;
ALTER TABLE {{schema}}.jobs VALIDATE CONSTRAINT jobs_status_check;

-- The job browser's 'waiting' page, in enqueue order.
CREATE INDEX jobs_waiting_browse_idx ON {{schema}}.jobs (created_at, id) WHERE status = 'waiting';

-- Wake-ups name ready jobs only: a flow's waiting jobs are not claimable (0007's, and status).
CREATE OR REPLACE FUNCTION {{schema}}.notify_jobs() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
  ready  text;
  queued boolean;
BEGIN
  SELECT string_agg(DISTINCT type, ','), bool_or(queue IS NOT NULL) INTO ready, queued FROM new_jobs WHERE run_at <= now() AND status = 'pending';
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

-- One edge: dependent waits for dependency. on_failure is what the dependency's failure (dead, or
-- cancelled) does to the dependent: 'fail' cancels it (and what depends on it, down the graph),
-- 'ignore' lets it run (it sees the failure), 'wait' keeps it waiting for a manual retry of the
-- dependency (a cancel still cancels it). resolved is how the dependency ended, once that counted.
CREATE TABLE {{schema}}.job_dependencies (
  dependency_id bigint NOT NULL,
  dependent_id  bigint NOT NULL,
  on_failure    text   NOT NULL DEFAULT 'fail' CHECK (on_failure IN ('fail', 'ignore', 'wait')),
  resolved      text   CHECK (resolved IN ('completed', 'dead', 'cancelled')),
  PRIMARY KEY (dependency_id, dependent_id)
);
CREATE INDEX job_dependencies_dependent_idx ON {{schema}}.job_dependencies (dependent_id);

-- How many of a waiting job's dependencies have not resolved yet. Its own narrow table: a fan-in's
-- count moves once per finishing dependency, and these updates stay small (HOT, no index of the
-- jobs table touched); the job row itself is written once, when the count reaches zero.
-- added_by: the claim whose run last added children to the job; that run's completion parks the
-- job (it runs again once they resolve, even when they resolved before the run ended).
CREATE TABLE {{schema}}.job_waits (
  job_id    bigint  PRIMARY KEY,
  remaining integer NOT NULL CHECK (remaining >= 0),
  added_by  uuid
);

-- Runs once per UPDATE statement on jobs, after it, with the rows it changed. Only rows of flows
-- are looked at; for any other statement (a claim, a renewal, a completion of jobs in no flow) it
-- returns after one scan of the changed rows, finding none.
--
-- Locks, each set in id order: the rows a failure cancels, the dependents' counts, the rows those
-- counts ready, the flows. Statements that finish dependencies of one fan-in lock its count before
-- its row, and the fenced writes lock job rows without waiting (SKIP LOCKED). Some orders still
-- cross (a cancel's own run of this trigger locks flows before the outer run locks counts; two
-- batches may ready each other's processing parents): PostgreSQL breaks such a deadlock and the
-- statement is tried again (docs/architecture.md, "Flows").
--
-- Steps: 1 a retried job that can never go is cancelled, and jobs wait or go by their counts;
-- 2 the edges out of jobs that ended are resolved; 3 what a failure dooms is cancelled; 4 counts
-- go down and jobs at zero go; 5 the flows' counts move.
CREATE FUNCTION {{schema}}.flow_advance() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
  -- The flow rows whose status changed: id, flow, status before and after, name in the flow.
  m_id bigint[]; m_flow bigint[]; m_was text[]; m_now text[]; m_node text[];
  -- The edges out of the rows that ended, as resolved here.
  e_dependent bigint[]; e_policy text[]; e_resolved text[]; e_dependency bigint[]; e_node text[];
  -- Jobs that wait or go again (step 1); jobs a failure cancels, with why (steps 1 and 3); jobs ready.
  flipped bigint[];
  d_id bigint[]; d_cause text[];
  readied bigint[];
  ready text;
  told bigint;
  -- Whether this statement's moves were counted in their flows already (step 1's cancel).
  counted boolean := false;
BEGIN
  PERFORM 1 FROM changed_after AS a WHERE a.flow_id IS NOT NULL LIMIT 1;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  -- Each row's status before and after, paired by position in id order (a statement updates a
  -- row once: the ids are the same on both sides). Not a join of the two: planned without
  -- statistics, it was a nested loop, 8 s for a statement that readied 10,000 jobs.
  SELECT array_agg(b.status ORDER BY b.id) INTO m_was FROM changed_before AS b;
  WITH paired AS (
    SELECT m.* FROM unnest(
      (SELECT array_agg(a.id ORDER BY a.id) FROM changed_after AS a), (SELECT array_agg(a.flow_id ORDER BY a.id) FROM changed_after AS a),
      m_was, (SELECT array_agg(a.status ORDER BY a.id) FROM changed_after AS a), (SELECT array_agg(a.flow_node ORDER BY a.id) FROM changed_after AS a)
    ) AS m(id, flow_id, was, now, node)
    WHERE m.flow_id IS NOT NULL AND m.was IS DISTINCT FROM m.now
  )
  SELECT array_agg(p.id), array_agg(p.flow_id), array_agg(p.was), array_agg(p.now), array_agg(p.node)
  INTO m_id, m_flow, m_was, m_now, m_node FROM paired AS p;
  IF m_id IS NULL THEN
    RETURN NULL;
  END IF;

  -- A job waits while any of its dependencies is unresolved, whichever statement moved it: its
  -- completion parked it (children added by its run), or it went back to pending with children
  -- still unresolved (a crashed run reclaimed by the sweep, a failed attempt, a drain's release,
  -- an operator's retry) and waits for them instead; a parked job whose children all resolved
  -- meanwhile goes at once. (Counts read without a lock: a child that resolves after this read
  -- locks the row, finds it waiting, and readies it, below.)
  -- A dead job an operator retried whose own dependency has failed over a 'fail' edge (or been
  -- cancelled over 'fail' or 'wait'): a parent that died before its child did, so the cascade
  -- passed it by. It could never go: it is cancelled, as the cascade would have cancelled it.
  SELECT array_agg(b.id), array_agg(b.cause) INTO d_id, d_cause
  FROM (
    SELECT m.id, min(format('dependency %s (job %s) ended %s', d.flow_node, e.dependency_id, e.resolved)) AS cause
    FROM unnest(m_id, m_was, m_now) AS m(id, was, now)
    JOIN {{schema}}.job_dependencies AS e ON e.dependent_id = m.id
    JOIN {{schema}}.jobs AS d ON d.id = e.dependency_id
    WHERE m.was = 'dead' AND m.now = 'pending'
      AND ((e.resolved = 'dead' AND e.on_failure = 'fail') OR (e.resolved = 'cancelled' AND e.on_failure IN ('fail', 'wait')))
    GROUP BY m.id
  ) AS b;
  IF d_id IS NOT NULL THEN
    -- This statement's moves are counted first: the cancel's own run of the trigger takes the job
    -- off the flow's live count, which must have counted it back on. (An operator's retry only.)
    PERFORM {{schema}}.flow_count(m_flow, m_was, m_now);
    counted := true;
    UPDATE {{schema}}.jobs AS j
    SET status = 'cancelled', finished_at = now(), lock_until = NULL, last_error = left('cancelled: ' || d.cause, 2000),
        errors = {{schema}}.append_error(j.errors, jsonb_build_object(
          'at', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'), 'operator', 'cancel', 'by', left('flow: ' || d.cause, 200)), 10),
        updated_at = now()
    FROM unnest(d_id, d_cause) AS d(id, cause)
    WHERE j.id = d.id AND j.status = 'pending';
  END IF;

  SELECT array_agg(m.id) INTO flipped
  FROM unnest(m_id, m_was, m_now) AS m(id, was, now)
  WHERE (m.now = 'waiting' AND m.was = 'processing'
         AND NOT EXISTS (SELECT 1 FROM {{schema}}.job_waits AS w WHERE w.job_id = m.id AND w.remaining > 0))
     OR (m.now = 'pending' AND EXISTS (SELECT 1 FROM {{schema}}.job_waits AS w WHERE w.job_id = m.id AND w.remaining > 0));
  -- (Each write here runs only when it has rows to write: a statement on jobs runs this trigger again.)
  IF flipped IS NOT NULL THEN
    UPDATE {{schema}}.jobs AS j
    SET status = CASE WHEN j.status = 'waiting' THEN 'pending' ELSE 'waiting' END, run_at = now(), updated_at = now()
    WHERE j.id = ANY (flipped) AND j.status IN ('waiting', 'pending');
  END IF;

  -- The edges out of the jobs that ended, resolved by how they ended; a dead dependency of a
  -- 'wait' edge stays unresolved (an operator's retry may still complete it). Only the statement
  -- that ends a dependency writes its edges: no two statements contend for one.
  WITH resolved AS (
    UPDATE {{schema}}.job_dependencies AS e SET resolved = m.now
    FROM unnest(m_id, m_now, m_node) AS m(id, now, node)
    WHERE e.dependency_id = m.id AND m.now IN ('completed', 'dead', 'cancelled') AND e.resolved IS NULL
      AND NOT (m.now = 'dead' AND e.on_failure = 'wait')
    RETURNING e.dependent_id, e.on_failure, e.resolved, e.dependency_id, m.node
  )
  SELECT array_agg(r.dependent_id), array_agg(r.on_failure), array_agg(r.resolved), array_agg(r.dependency_id), array_agg(r.node)
  INTO e_dependent, e_policy, e_resolved, e_dependency, e_node FROM resolved AS r;
  IF e_dependent IS NULL THEN
    IF NOT counted THEN
      PERFORM {{schema}}.flow_count(m_flow, m_was, m_now);
    END IF;
    RETURN NULL;
  END IF;

  -- Dependents a failure cancels: over 'fail' edges from a dead job, over 'fail' and 'wait' edges
  -- from a cancelled one, and so on down the graph (a cancelled dependent cancels its own
  -- dependents the same way). Found in one pass and cancelled in one statement (whose own run of
  -- this trigger then resolves their edges: 'ignore' edges count below), each with the reason
  -- naming the dependency whose end started it. A processing job cancelled here (a parent whose
  -- child failed) is told as cancelJob tells it.
  WITH RECURSIVE down(id, cause) AS (
    SELECT e.dependent_id, format('dependency %s (job %s) ended %s', e.node, e.dependency_id, e.resolved)
    FROM unnest(e_dependent, e_policy, e_resolved, e_dependency, e_node) AS e(dependent_id, on_failure, resolved, dependency_id, node)
    WHERE (e.resolved = 'dead' AND e.on_failure = 'fail') OR (e.resolved = 'cancelled' AND e.on_failure IN ('fail', 'wait'))
    UNION
    SELECT e.dependent_id, d.cause
    FROM down AS d JOIN {{schema}}.job_dependencies AS e ON e.dependency_id = d.id
    WHERE e.on_failure IN ('fail', 'wait') AND e.resolved IS NULL
  )
  SELECT array_agg(t.id), array_agg(t.cause) INTO d_id, d_cause
  FROM (SELECT down.id, min(down.cause) AS cause FROM down GROUP BY down.id) AS t;
  IF d_id IS NOT NULL THEN
    WITH locked AS (
      SELECT j.id, j.status AS was FROM {{schema}}.jobs AS j
      WHERE j.id = ANY (d_id) AND j.status IN ('waiting', 'pending', 'processing')
      ORDER BY j.id FOR UPDATE
    ), cancelled AS (
      UPDATE {{schema}}.jobs AS j
      SET status = 'cancelled', finished_at = now(), lock_until = NULL, last_error = left('cancelled: ' || d.cause, 2000),
          errors = {{schema}}.append_error(j.errors, jsonb_build_object(
            'at', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'), 'operator', 'cancel', 'by', left('flow: ' || d.cause, 200)), 10),
          updated_at = now()
      FROM unnest(d_id, d_cause) AS d(id, cause), locked AS l
      WHERE j.id = d.id AND l.id = d.id
      RETURNING j.id, j.claim_token, l.was
    )
    SELECT count(*) INTO told FROM cancelled AS c
    LEFT JOIN LATERAL (SELECT pg_notify('picket:' || TG_TABLE_SCHEMA, '!cancel:' || c.id || ':' || c.claim_token) WHERE c.was = 'processing') AS told ON true;
  END IF;

  -- Edges that count towards their dependent going: a completed dependency, or a failed one over
  -- an 'ignore' edge. Each dependent's count goes down by its edges here, counts locked in id order.
  WITH counted AS (
    SELECT e.dependent_id AS id, count(*)::int AS n
    FROM unnest(e_dependent, e_policy, e_resolved) AS e(dependent_id, on_failure, resolved)
    WHERE e.resolved = 'completed' OR e.on_failure = 'ignore'
    GROUP BY e.dependent_id
  ), locked AS (
    SELECT w.job_id FROM {{schema}}.job_waits AS w WHERE w.job_id = ANY (ARRAY(SELECT id FROM counted)) ORDER BY w.job_id FOR UPDATE
  ), lowered AS (
    UPDATE {{schema}}.job_waits AS w SET remaining = w.remaining - c.n
    FROM counted AS c, locked AS l WHERE w.job_id = c.id AND l.job_id = c.id
    RETURNING w.job_id, w.remaining
  )
  SELECT array_agg(l.job_id ORDER BY l.job_id) INTO readied FROM lowered AS l WHERE l.remaining = 0;

  IF readied IS NOT NULL THEN
    -- Each row is locked whatever its status: a parent still processing (its run not yet written)
    -- then writes 'waiting' only after this commits, and its own move (above) finds the count zero.
    PERFORM 1 FROM {{schema}}.jobs AS j WHERE j.id = ANY (readied) ORDER BY j.id FOR UPDATE;
    WITH went AS (
      UPDATE {{schema}}.jobs AS j SET status = 'pending', run_at = now(), updated_at = now()
      WHERE j.id = ANY (readied) AND j.status = 'waiting'
      RETURNING j.type, j.queue
    )
    SELECT string_agg(DISTINCT g.type, ',') || CASE WHEN bool_or(g.queue IS NOT NULL) THEN ',!queued' ELSE '' END
    INTO ready FROM went AS g;
    IF ready IS NOT NULL THEN
      IF octet_length(ready) >= 8000 THEN
        ready := '*';
      END IF;
      PERFORM pg_notify('picket:' || TG_TABLE_SCHEMA, ready);
    END IF;
  END IF;

  IF NOT counted THEN
    PERFORM {{schema}}.flow_count(m_flow, m_was, m_now);
  END IF;
  RETURN NULL;
END
$$;

-- The flows' counts, moved by the statuses their jobs left and entered; flows locked in id order.
CREATE FUNCTION {{schema}}.flow_count(flow bigint[], was text[], now_is text[]) RETURNS void
LANGUAGE sql
AS $$
  WITH delta AS (
    SELECT m.flow_id,
           sum((m.now IN ('pending', 'processing', 'waiting'))::int - (m.was IN ('pending', 'processing', 'waiting'))::int)::int AS live,
           sum((m.now = 'dead')::int - (m.was = 'dead')::int)::int AS dead,
           sum((m.now = 'cancelled')::int - (m.was = 'cancelled')::int)::int AS cancelled
    FROM unnest(flow, was, now_is) AS m(flow_id, was, now) GROUP BY m.flow_id
  ), locked AS (
    SELECT f.id FROM {{schema}}.flows AS f
    WHERE f.id = ANY (ARRAY(SELECT d.flow_id FROM delta AS d WHERE d.live <> 0 OR d.dead <> 0 OR d.cancelled <> 0))
    ORDER BY f.id FOR UPDATE
  )
  UPDATE {{schema}}.flows AS f
  SET live = f.live + d.live, dead = f.dead + d.dead, cancelled = f.cancelled + d.cancelled,
      status = CASE WHEN f.live + d.live > 0 THEN 'running'
                    WHEN f.dead + d.dead > 0 THEN 'failed'
                    WHEN f.cancelled + d.cancelled > 0 THEN 'cancelled'
                    ELSE 'completed' END,
      finished_at = CASE WHEN f.live + d.live > 0 THEN NULL ELSE now() END
  FROM delta AS d, locked AS l
  WHERE f.id = d.flow_id AND l.id = d.flow_id
$$;

CREATE TRIGGER jobs_flow_advance AFTER UPDATE ON {{schema}}.jobs
  REFERENCING OLD TABLE AS changed_before NEW TABLE AS changed_after
  FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.flow_advance();
