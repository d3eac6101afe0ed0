-- The reaper's index is keyed on the lease itself, not on the status.
--
-- A partial index WHERE status = 'PROCESSING' matched the fence of every
-- executor statement (status = 'PROCESSING' AND attempt = ...). Planned on
-- statistics taken before a spike (no PROCESSING rows then), a batch of a
-- thousand ids was read by scanning that whole index instead of probing
-- the primary key a thousand times: a spike's load ran ~30 times slower.
-- lease_until is set exactly while a payment is PROCESSING (the claim sets
-- it, every move out of PROCESSING clears it), so this index holds the
-- same rows, and no fence can prove its predicate.
UPDATE payments SET lease_until = NULL, lease_owner = NULL
WHERE status <> 'PROCESSING' AND lease_until IS NOT NULL;
DROP INDEX payments_lease_idx;
CREATE INDEX payments_lease_idx ON payments (lease_until) WHERE lease_until IS NOT NULL;
