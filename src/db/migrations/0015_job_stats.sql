-- picket 0015: the history the dashboard's charts draw, kept in the database rather than in the
-- page (which started empty at every load).
--
-- job_stats: per minute and task, what the workers did: jobs completed, attempts failed (retried
-- or dead), jobs dead, and the pickup delay (run_at to handler start) summed over the jobs started.
-- Each worker adds its counts since its previous heartbeat to the current minute's rows, in its
-- heartbeat statement (one upsert per task it ran, every 2 s; never per job).
--
-- job_depth: per minute and task, the live jobs by state, sampled by the first heartbeat of the
-- minute (one count of the live rows a minute, however many workers).
--
-- Both keep 25 hours (the day the charts show, and an hour's margin): each heartbeat deletes the
-- minutes before that, through the primary key.
CREATE TABLE {{schema}}.job_stats (
  minute     timestamptz NOT NULL,
  type       text        NOT NULL,
  completed  integer     NOT NULL DEFAULT 0,
  failed     integer     NOT NULL DEFAULT 0,
  dead       integer     NOT NULL DEFAULT 0,
  started    integer     NOT NULL DEFAULT 0,
  pickup_ms  float8      NOT NULL DEFAULT 0,
  PRIMARY KEY (minute, type)
);

CREATE TABLE {{schema}}.job_depth (
  minute     timestamptz NOT NULL,
  type       text        NOT NULL,
  ready      integer     NOT NULL,
  scheduled  integer     NOT NULL,
  retrying   integer     NOT NULL,
  processing integer     NOT NULL,
  PRIMARY KEY (minute, type)
);
