-- paysched schema, version 7: audit_events.event as text.
-- The audit-consumer parses every envelope before it writes it (one that is
-- not valid JSON is never written), so the json type's check on insert only
-- repeated that work: about a fifth of the cost of an audit row, paid when a
-- spike's backlog is written. The bytes are kept exactly as received; query
-- them with event::json (or ::jsonb). The column is rewritten once,
-- holding audit_events meanwhile: the consumer just waits.
ALTER TABLE audit_events ALTER COLUMN event TYPE text;
