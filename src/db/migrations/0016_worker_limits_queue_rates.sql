-- picket 0016: two more things each worker says in its heartbeat, for the dashboard's queues panel.
--
-- limits: the cluster-wide limits it claims under,
--   { "<task>": { "clusterConcurrency": 5, "rateLimit": { "max": 10, "windowMs": 1000 } } },
--   shown beside how much of each is in use. The limits stay in the workers' task definitions,
--   given to each claim: nothing reads this column to claim.
-- queue_rates: per named queue, the jobs it completed and the attempts that failed per second
--   since its previous beat, { "<queue>": { "completed": 2.5, "failed": 0.5 } }. Counted by the
--   workers, as completed_per_s is (0009): a completed row may be deleted at completion.
ALTER TABLE {{schema}}.workers
  ADD COLUMN limits jsonb NOT NULL DEFAULT '{}'::jsonb,
  ADD COLUMN queue_rates jsonb NOT NULL DEFAULT '{}'::jsonb;
