-- picket 0018: workflows, a user's XState machine run durably.
--
-- An instance's state is its machine's persisted snapshot, written only by the statement that
-- applies one event (src/db/workflows.ts): that statement checks the instance's sequence number
-- (compare-and-set) and the applier job's claim (the fence), and in the same statement consumes
-- the event, enqueues the tasks and timers the transition starts and cancels those it stops. Events
-- wait in the instance's inbox (workflow_events, applied_at NULL) until then; applied ones stay as
-- its history.

CREATE TABLE {{schema}}.workflows (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  name        text        NOT NULL CHECK (length(name) BETWEEN 1 AND 128),
  -- Idempotent start: one instance per (name, key) for as long as the instance is kept.
  key         text        CHECK (key IS NULL OR length(key) BETWEEN 1 AND 512),
  -- The machine the instance runs, pinned by its first event: the version its definition names and
  -- the fingerprint of the machine's definition (states, transitions, invocations, action names: a
  -- machine changed in those under the same version is refused; its implementations are not in it).
  version     text,
  fingerprint text,
  -- 'starting' until a worker applied its start; then 'running' until the machine reaches a final
  -- state ('done'), fails ('failed') or is cancelled.
  status      text        NOT NULL DEFAULT 'starting' CHECK (status IN ('starting', 'running', 'done', 'failed', 'cancelled')),
  snapshot    jsonb,
  -- The state value (as XState gives it) for listing without parsing snapshots.
  state       jsonb,
  -- The task invocations in flight: invocation id -> the job that runs it. A result of any other
  -- job (an invocation the machine stopped) is dropped when it arrives.
  tasks       jsonb       NOT NULL DEFAULT '{}'::jsonb,
  -- Events applied so far: each apply compares and increments it.
  seq         integer     NOT NULL DEFAULT 0,
  -- The applier job that holds the instance, and its claim's token: one applies its events at a
  -- time. A hold whose claim is no longer live (its worker died, its job was swept) is free.
  applier_job   bigint,
  applier_token uuid,
  output      jsonb,
  error       text,
  created_at  timestamptz NOT NULL DEFAULT now(),
  updated_at  timestamptz NOT NULL DEFAULT now(),
  finished_at timestamptz
);
CREATE UNIQUE INDEX workflows_key_idx ON {{schema}}.workflows (name, key) WHERE key IS NOT NULL;
CREATE INDEX workflows_list_idx ON {{schema}}.workflows (name, status, id);
CREATE INDEX workflows_finished_idx ON {{schema}}.workflows (finished_at) WHERE finished_at IS NOT NULL;

-- The inbox and the history of each instance. kind: 'start' (its input), 'send' (sendToWorkflow),
-- 'task' (a task job ended: job_id, and the job's status, result or error in event), 'timer' (a
-- delayed event, due at due_at, cancellable by send_id; wake_job is the job that applies it then),
-- 'cancel' (cancelWorkflow, recorded as applied). outcome once applied: 'applied', or 'dropped'
-- (note says why: a late task result, no transition took it, a finished instance). by: who sent
-- or cancelled, when the caller said.
CREATE TABLE {{schema}}.workflow_events (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  workflow_id bigint      NOT NULL,
  kind        text        NOT NULL CHECK (kind IN ('start', 'send', 'task', 'timer', 'cancel')),
  event       jsonb       NOT NULL,
  due_at      timestamptz NOT NULL DEFAULT now(),
  send_id     text,
  wake_job    bigint,
  job_id      bigint,
  created_at  timestamptz NOT NULL DEFAULT now(),
  applied_at  timestamptz,
  seq         integer,
  outcome     text        CHECK (outcome IN ('applied', 'dropped')),
  note        text,
  state       jsonb,
  by          text        CHECK (by IS NULL OR length(by) BETWEEN 1 AND 200)
);
CREATE INDEX workflow_events_inbox_idx ON {{schema}}.workflow_events (workflow_id, due_at, id) WHERE applied_at IS NULL;
-- An instance's history in the order applied; retention finds all of an instance's events by it too.
CREATE INDEX workflow_events_history_idx ON {{schema}}.workflow_events (workflow_id, applied_at);

-- The machines workers run, so that a console without the user's code can draw an instance's
-- statechart: one row per (name, fingerprint), written when a worker starts. json, not jsonb: the
-- states keep the order they are written in, which is the order they are drawn in.
CREATE TABLE {{schema}}.workflow_machines (
  name        text        NOT NULL,
  fingerprint text        NOT NULL,
  version     text        NOT NULL,
  definition  json        NOT NULL,
  seen_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (name, fingerprint)
);

-- A task job's instance (the jobs that apply events, 'picket.workflow', name theirs in their payload
-- only: they are not kept once done). No foreign key (its check would run on every
-- insert of any job).
ALTER TABLE {{schema}}.jobs ADD COLUMN workflow_id bigint;
CREATE INDEX jobs_workflow_idx ON {{schema}}.jobs (workflow_id, id) WHERE workflow_id IS NOT NULL;

-- A task job that ended reports to its instance, in the statement that ended it: its result or
-- error goes to the inbox, with a job to apply it. A row counts once, when its status becomes final (paired with its status before by
-- position in id order, as flow_advance does: a statement updates a row once).
CREATE FUNCTION {{schema}}.workflow_report() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
  PERFORM 1 FROM changed_after AS a WHERE a.workflow_id IS NOT NULL LIMIT 1;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  WITH ended AS (
    SELECT m.id, m.workflow_id, m.status, m.result, m.error FROM unnest(
      (SELECT array_agg(a.id ORDER BY a.id) FROM changed_after AS a),
      (SELECT array_agg(a.workflow_id ORDER BY a.id) FROM changed_after AS a),
      (SELECT array_agg(a.status ORDER BY a.id) FROM changed_after AS a),
      (SELECT array_agg(b.status ORDER BY b.id) FROM changed_before AS b),
      (SELECT array_agg(a.result ORDER BY a.id) FROM changed_after AS a),
      (SELECT array_agg(a.last_error ORDER BY a.id) FROM changed_after AS a)
    ) AS m(id, workflow_id, status, was, result, error)
    WHERE m.workflow_id IS NOT NULL
      AND m.status IN ('completed', 'dead', 'cancelled') AND m.was NOT IN ('completed', 'dead', 'cancelled')
  ), reported AS (
    INSERT INTO {{schema}}.workflow_events (workflow_id, kind, event, job_id)
    SELECT e.workflow_id, 'task',
           jsonb_build_object('status', e.status, 'result', e.result, 'error', e.error), e.id
    FROM ended AS e
    RETURNING workflow_id
  )
  INSERT INTO {{schema}}.jobs (type, payload)
  SELECT 'picket.workflow', jsonb_build_object('workflow', r.workflow_id)
  FROM (SELECT DISTINCT workflow_id FROM reported) AS r;
  RETURN NULL;
END
$$;

CREATE TRIGGER jobs_workflow_report AFTER UPDATE ON {{schema}}.jobs
  REFERENCING OLD TABLE AS changed_before NEW TABLE AS changed_after
  FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.workflow_report();
