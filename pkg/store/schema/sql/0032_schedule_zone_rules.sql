-- paysched schema, version 32: the zone rules each occurrence was made
-- with (issue 44). An occurrence's charge time is its local time read in
-- its schedule's zone when it was made; a tzdata release can move that
-- instant. Each occurrence records a fingerprint of its zone's offsets as
-- the planner that made it read them (recurrence.ZoneRules). A planner
-- reads again, at its start and hourly, the PENDING occurrences made ahead
-- whose fingerprint is not its own, and re-makes those whose instant moved
-- (stamping the others with its fingerprint): a fleet mid-way through a
-- rolling deploy converges once one build remains, whichever made them.
ALTER TABLE schedule_occurrences ADD COLUMN rules text;
GRANT UPDATE (rules) ON schedule_occurrences TO paysched_api;
