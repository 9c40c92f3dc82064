-- picket 0009: each worker's completion rate, by task, in its heartbeat row.
--
-- A worker deletes a completed job's row at completion unless it keeps completed jobs
-- (keepCompleted), so the dashboard's rate of completions cannot be counted from rows. Each
-- worker reports its own instead: jobs completed per second since its previous beat, by task
-- ({ "email": 12.5 }). Workers of older versions leave it empty.
ALTER TABLE {{schema}}.workers ADD COLUMN completed_per_s jsonb NOT NULL DEFAULT '{}'::jsonb;
