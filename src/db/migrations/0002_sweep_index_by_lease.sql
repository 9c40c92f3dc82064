-- picket 0002: the sweep index keyed by the lease alone, so no partial index matches the fence.
--
-- 0001's sweep index was partial on status = 'processing', the same predicate every fenced write
-- carries. A freshly analysed table has almost no processing rows, so the planner estimated that
-- index at one row and, once the fenced statements ran as generic prepared plans, drove the batch
-- join from it: every processing row was compared with every claim in the batch. At 200 claims
-- per batch a completion took 45 µs per job instead of 13, and it grows with the number of jobs
-- in flight across all workers. Keyed on lock_until IS NOT NULL, the index still serves the
-- sweep's `status = 'processing' AND lock_until < now()`, and the fenced writes find each claim
-- by primary key.
--
-- lock_until is set exactly while a row is processing: the claim writes it, every write that
-- leaves processing clears it, processing_has_claim forbids a processing row without it, and the
-- check added here forbids it on any other row. Without that check, finished rows left holding a
-- lease by hand-written SQL would all sit in the sweep's index, and every sweep would read them.
-- Such rows, if an earlier schema holds any, lose the stale lease first (it means nothing on a row
-- that is not processing), so the check cannot fail the upgrade.
--
-- Cost on a large table: the check is validated and the index rebuilt under the migration's lock
-- on the table, so workers wait for it; run it before the deploy's workers start.
UPDATE {{schema}}.jobs SET lock_until = NULL WHERE lock_until IS NOT NULL AND status <> 'processing';
ALTER TABLE {{schema}}.jobs
  ADD CONSTRAINT lease_only_while_processing CHECK (lock_until IS NULL OR status = 'processing');
DROP INDEX {{schema}}.jobs_sweep_idx;
CREATE INDEX jobs_sweep_idx ON {{schema}}.jobs (lock_until) WHERE lock_until IS NOT NULL;
