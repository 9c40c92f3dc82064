-- picket 0005: durable steps, and the task names each live worker handles.
--
-- A step is one named piece of a job's handler whose JSON result is kept, so that a later attempt
-- of the same job (after a crash, a timeout or a lost lease) gets the result back instead of doing
-- the step's work again. A step row is written only under the job's live claim (the fence: the
-- job row locked, matched by id, claim token and status = 'processing'), at most once per name.
-- The rows go with their job (retention deletes finished jobs, and their steps with them).
CREATE TABLE {{schema}}.job_steps (
  job_id      bigint      NOT NULL REFERENCES {{schema}}.jobs (id) ON DELETE CASCADE,
  name        text        NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
  -- NULL: the step's function returned undefined (JSON has no such value).
  result      jsonb,
  -- The attempt and the claim that recorded it: a job's history shows which run did the work.
  attempt     integer     NOT NULL,
  claim_token uuid        NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (job_id, name)
);

-- The task names a worker has handlers for, so a dashboard and `picket stats` can show pending
-- jobs that no live worker can run, and the CLI can warn before enqueueing such a job.
ALTER TABLE {{schema}}.workers ADD COLUMN tasks text[] NOT NULL DEFAULT '{}';
