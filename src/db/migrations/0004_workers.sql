-- picket 0004: a heartbeat row per live worker, so one dashboard sees the workers on every host.
--
-- Each worker writes its row every few seconds (an upsert by id) and deletes it when it stops.
-- A worker that dies leaves its row; the row's last_beat says when it was last heard of, and any
-- worker deletes rows silent for an hour. Nothing here is read by the queue itself: claims,
-- leases and the sweep never look at it.
CREATE TABLE {{schema}}.workers (
  id           text        PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 200),
  host         text        NOT NULL,
  pid          integer     NOT NULL,
  version      text        NOT NULL,
  started_at   timestamptz NOT NULL,
  last_beat    timestamptz NOT NULL DEFAULT now(),
  concurrency  integer     NOT NULL,
  -- The supervisor machine's state, as its value reads ("running.polling", "draining").
  state        text        NOT NULL,
  -- The jobs it holds (a bounded sample when it holds many): [{ "id", "type", "state" }].
  jobs         jsonb       NOT NULL DEFAULT '[]'::jsonb,
  running      integer     NOT NULL DEFAULT 0,
  waiting      integer     NOT NULL DEFAULT 0
);
