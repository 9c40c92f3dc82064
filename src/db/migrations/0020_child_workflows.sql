-- picket 0020: a workflow invokes another workflow as a child.
--
-- A transition that invokes a child workflow (childWorkflow(definition) in setup's actors) starts
-- an instance of it in the statement that applies the transition (src/db/workflows.ts, THE
-- APPLY), with its start in its inbox and a job to apply it, and names it in the parent's
-- `children` (invocation id -> instance id), as `tasks` names the jobs of tasks in flight. When the
-- child ends (done, failed, cancelled), the statement that ends it writes a 'child' event to the
-- parent's inbox with a job to apply it; the parent turns it into xstate.done.actor.<id> (with the
-- child's output) or xstate.error.actor.<id>, if it still names that child for that invocation
-- (otherwise the event is recorded as dropped, a late result). A parent that stops the invocation,
-- ends, or is cancelled has each such child cancelled by a job ('cancel' in an applier job's
-- payload), which cancels it as cancelWorkflow does, its own children after it.
ALTER TABLE {{schema}}.workflows
  ADD COLUMN parent_id bigint,
  ADD COLUMN parent_invoke text,
  ADD COLUMN children jsonb NOT NULL DEFAULT '{}'::jsonb;

ALTER TABLE {{schema}}.workflow_events DROP CONSTRAINT workflow_events_kind_check;
ALTER TABLE {{schema}}.workflow_events ADD CONSTRAINT workflow_events_kind_check
  CHECK (kind IN ('start', 'send', 'task', 'timer', 'cancel', 'child'));
