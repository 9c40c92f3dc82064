-- picket 0011: attempts numbered across operator retries.
--
-- An operator's retry gives a dead job its whole max_attempts again (attempts back to 0), so the
-- attempt a history entry names could no longer be the row's attempts: after a retry the next
-- failure said "attempt 1" a second time. The retry now adds the attempts of the run it ends to
-- prior_attempts, and an entry names prior_attempts + attempts: 1–3, the retry, then 4–6, while
-- max_attempts still bounds attempts, the current run's. Claims, releases and the sweep never
-- write it. A constant default and no constraint: no rewrite or scan of the table.
ALTER TABLE {{schema}}.jobs ADD COLUMN prior_attempts integer NOT NULL DEFAULT 0;
