-- picket 0006: recurring jobs. One row per schedule: its cron pattern and time zone, the payload of
-- the jobs it makes, what to do with ticks missed while no worker ran it, and how far it has ticked.
--
-- The cron pattern is read by the workers (croner), not by PostgreSQL; the database holds what a
-- tick needs to happen exactly once. A worker that finds ticks due advances last_tick and inserts
-- their jobs in one statement, conditioned on the revision it read (a compare-and-set): of any
-- number of workers that read the same row, one statement advances it and the others change
-- nothing, so each tick makes at most one job, whoever fires it and however often they restart.
CREATE TABLE {{schema}}.schedules (
  name        text        PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 200),
  -- The task whose jobs it makes; only workers that run this task fire it.
  task        text        NOT NULL CHECK (length(task) BETWEEN 1 AND 128),
  cron        text        NOT NULL CHECK (length(cron) BETWEEN 1 AND 200),
  -- An IANA zone ("Europe/Paris"); null reads the pattern in UTC.
  timezone    text,
  -- Every job of the schedule gets this object, plus "scheduledAt": the tick, as ISO 8601 text.
  payload     jsonb       NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(payload) = 'object'),
  -- After downtime, how many of the missed ticks (the newest ones) still make a job:
  -- 0 skips them ("skip"), 1 runs the latest ("latest"), N catches up at most N.
  catch_up    integer     NOT NULL DEFAULT 1 CHECK (catch_up BETWEEN 0 AND 1000),
  -- Ticks at or before this instant are done (fired or skipped) and never fire again. A new
  -- schedule starts at the moment it is created: it owes nothing from before it existed.
  last_tick   timestamptz NOT NULL DEFAULT now(),
  -- Bumped by every write (a tick fired, the definition changed): a worker's plan counts only if
  -- the row is still at the revision the worker read.
  revision    bigint      NOT NULL DEFAULT 1,
  -- 'task' when declared by defineTask({ schedule }) (a worker running that task without a
  -- schedule removes it), 'api' when registered at run time (removed only by removeSchedule).
  source      text        NOT NULL DEFAULT 'api' CHECK (source IN ('task', 'api')),
  created_at  timestamptz NOT NULL DEFAULT now(),
  updated_at  timestamptz NOT NULL DEFAULT now()
);

-- Each worker reads the schedules of the tasks it runs, once a second.
CREATE INDEX schedules_task_idx ON {{schema}}.schedules (task);
