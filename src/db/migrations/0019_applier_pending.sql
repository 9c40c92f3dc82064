-- picket 0019: a workflow instance's applier job that is due and not yet claimed, found by the send.
--
-- An applier applies every due event of its instance (src/workflows/applier.ts), so a send that finds
-- one waiting joins it instead of enqueueing a job of its own (sendSql in src/db/workflows.ts): a burst
-- of events to one instance costs one claim and one completion, not one per event. Only pending
-- applier rows are in the index: a claim takes a row out of it, and the hot path of every other task
-- pays nothing. The payload is indexed as jsonb, not cast: a user's own job named 'picket.workflow'
-- may carry any payload, and a cast in the index would refuse its insert.
CREATE INDEX jobs_applier_pending_idx ON {{schema}}.jobs ((payload -> 'workflow'))
  WHERE type = 'picket.workflow' AND status = 'pending';

-- A timer's job is never joined: it is deleted when its timer is cancelled (by an apply, or by a
-- cancel of the instance, which cannot see an event that commits after it began), and an event that
-- had joined it would be left without a job. picket marks a timer's job in its payload from this
-- version on ('timer': true); the pending ones made before are marked here.
UPDATE {{schema}}.jobs AS j SET payload = j.payload || '{"timer": true}'
WHERE j.id IN (SELECT e.wake_job FROM {{schema}}.workflow_events AS e WHERE e.wake_job IS NOT NULL AND e.applied_at IS NULL)
  AND j.status = 'pending';
