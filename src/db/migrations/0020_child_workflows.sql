-- picket 0020: a workflow invokes another workflow as a child.
--
-- A transition that invokes a child workflow (childWorkflow(definition) in setup's actors) starts
-- an instance of it in the statement that applies the transition (src/db/workflows.ts, THE
-- APPLY), with its start in its inbox and a job to apply it, and names it in the parent's
-- `children` (invocation id -> instance id), as `tasks` names the jobs of tasks in flight. A parent
-- that stops the invocation, ends, or is cancelled has each such child cancelled by a job of the
-- task 'picket.workflow.cancel', which cancels it as cancelWorkflow does, its own children after it.
ALTER TABLE {{schema}}.workflows
  ADD COLUMN parent_id bigint,
  ADD COLUMN parent_invoke text,
  ADD COLUMN children jsonb NOT NULL DEFAULT '{}'::jsonb;

ALTER TABLE {{schema}}.workflow_events DROP CONSTRAINT workflow_events_kind_check;
ALTER TABLE {{schema}}.workflow_events ADD CONSTRAINT workflow_events_kind_check
  CHECK (kind IN ('start', 'send', 'task', 'timer', 'cancel', 'child'));

-- A child that ends (done, failed, cancelled), by whatever statement ends it (an apply, a cancel,
-- a worker of an older version), tells its parent: a 'child' event in the parent's inbox with a job
-- to apply it, as a task's end is told by workflow_report. The parent turns it into
-- xstate.done.actor.<id> (the child's output) or xstate.error.actor.<id>, if it still names that
-- child for that invocation; otherwise it is dropped as a late result. A parent that has ended is not
-- told (nothing would apply the event, and retention may have removed the parent). The WHEN clause
-- keeps every other update of an instance (each event applied) from calling the function at all.
CREATE FUNCTION {{schema}}.workflow_child_ended() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
  WITH told AS (
    INSERT INTO {{schema}}.workflow_events (workflow_id, kind, event)
    SELECT p.id, 'child', jsonb_build_object('workflow', NEW.id, 'status', NEW.status, 'output', NEW.output, 'error', NEW.error)
    FROM {{schema}}.workflows AS p WHERE p.id = NEW.parent_id AND p.status IN ('starting', 'running')
    RETURNING workflow_id
  )
  INSERT INTO {{schema}}.jobs (type, payload) SELECT 'picket.workflow', jsonb_build_object('workflow', t.workflow_id) FROM told AS t;
  RETURN NULL;
END;
$$;

CREATE TRIGGER workflow_child_ended AFTER UPDATE OF status ON {{schema}}.workflows
  FOR EACH ROW
  WHEN (NEW.parent_id IS NOT NULL AND NEW.status IN ('done', 'failed', 'cancelled') AND OLD.status IN ('starting', 'running'))
  EXECUTE FUNCTION {{schema}}.workflow_child_ended();
