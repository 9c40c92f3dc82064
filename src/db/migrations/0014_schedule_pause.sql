-- picket 0014: pausing a schedule.
--
-- A paused schedule fires no tick: the workers' reading of due schedules leaves it out. Its
-- resume starts counting again from the moment it is resumed (last_tick moves to now): the ticks
-- that fell while it was paused are skipped, not caught up, since stopping them was the point.
-- Constant defaults (NULL): no rewrite of the table.
ALTER TABLE {{schema}}.schedules
  ADD COLUMN paused_at timestamptz,
  ADD COLUMN paused_by text CHECK (length(paused_by) <= 200);
