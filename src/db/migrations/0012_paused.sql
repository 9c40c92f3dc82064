-- picket 0012: pausing a queue or a task.
--
-- A row here stops every claim from taking the jobs of that queue (a job that names it) or of that
-- task, on every worker of every host, from the first claim that begins after the pause commits:
-- the fast claim leaves a paused task out of the types it wants, and the slow claim is given a
-- paused task's budget and a paused queue's concurrency as 0 (src/db/claim.ts, claim-limited.ts).
-- Nothing else changes: the jobs stay pending, running jobs run on and write their outcomes, the
-- sweep and retries work as before, and schedules go on enqueueing. A queue is held in order while
-- paused, as it is behind a head no worker can take.
--
-- Tiny (one row per paused name), read by primary key or whole: no plan here depends on the jobs
-- table's statistics (invariant 14).
CREATE TABLE {{schema}}.paused (
  kind      text        NOT NULL CHECK (kind IN ('queue', 'task')),
  name      text        NOT NULL CHECK (length(name) BETWEEN 1 AND 128),
  paused_at timestamptz NOT NULL DEFAULT now(),
  -- Who paused it (the CLI's --by, the OS user at the host; the dashboard), NULL when not said.
  paused_by text        CHECK (length(paused_by) <= 200),
  PRIMARY KEY (kind, name)
);
