-- picket 0016: each worker says in its heartbeat the cluster-wide limits it claims under
-- ({ "<task>": { "clusterConcurrency": 5, "rateLimit": { "max": 10, "windowMs": 1000 } } }), so
-- the dashboard can show each limit beside how much of it is in use. The limits themselves stay in
-- the workers' task definitions, given to each claim; nothing reads this column to claim.
ALTER TABLE {{schema}}.workers ADD COLUMN limits jsonb NOT NULL DEFAULT '{}'::jsonb;
