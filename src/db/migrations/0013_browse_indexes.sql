-- picket 0013: indexes for browsing jobs by state (src/db/job-browser.ts, the dashboard's jobs view).
--
-- Each state the browser lists is read newest or oldest first from an index on its time, a page at a
-- time (keyset: the next page starts after the last row's time and id), so a page costs the same at
-- a million rows as at a hundred. The hot path pays for these only where it writes such a row:
-- a pending row gets an entry when it is enqueued, retried or released (a claim writes a processing
-- row, which matches none of them); a dead or cancelled row when a job dies or is cancelled.
-- Completed rows are browsed through jobs_finished_idx (0001) and running ones through
-- jobs_sweep_idx (0002): no index here for them, so a completion and a claim write nothing more.
--
-- Built without CONCURRENTLY (migrations run in a transaction): on a table of millions of rows,
-- writes wait while they are built, a few seconds per million rows.
CREATE INDEX jobs_pending_browse_idx ON {{schema}}.jobs (run_at, id) WHERE status = 'pending';
CREATE INDEX jobs_dead_browse_idx ON {{schema}}.jobs (finished_at, id) WHERE status = 'dead';
CREATE INDEX jobs_cancelled_browse_idx ON {{schema}}.jobs (finished_at, id) WHERE status = 'cancelled';
