-- paysched schema, version 32: the zone rules the planner last planned
-- with (issue 44). An occurrence's charge time is its local time read in
-- its schedule's zone when it was made; a tzdata release can move that
-- instant. The planner keeps, per zone of an active schedule, a
-- fingerprint of the zone's offsets as its process reads them
-- (recurrence.ZoneRules); when its own differs (a new build, a host's
-- tzdata update), it reads that zone's PENDING occurrences made ahead
-- again and re-makes those whose instant moved.
CREATE TABLE schedule_zone_rules (
    zone       text        PRIMARY KEY,
    rules      text        NOT NULL,
    checked_at timestamptz NOT NULL DEFAULT now()
);
GRANT SELECT, INSERT, UPDATE ON schedule_zone_rules TO paysched_api;
GRANT SELECT ON schedule_zone_rules TO paysched_admin;
