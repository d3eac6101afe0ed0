-- paysched schema, version 22: the console searches by tenant and by
-- gateway ref, each on an index (issue 33).
--
-- payment_index learns each payment's tenant at create, as it learned the
-- payee in version 14: it is written once, never updated on the engine's
-- path, so the index costs the create one entry and the spike nothing.
ALTER TABLE payment_index ADD COLUMN tenant text;
UPDATE payment_index i SET tenant = p.tenant FROM payments p WHERE p.id = i.id AND p.due_time = i.due_time;
CREATE INDEX payment_index_tenant_due ON payment_index (tenant, due_time, id) WHERE tenant IS NOT NULL;

-- A gateway ref is found through the attempt that got it: one probe of an
-- unpartitioned table, whatever the payment's day. The attempt's
-- completion is not a HOT update already (it changes finished_at, in
-- payment_attempts_open_idx's predicate), so this adds one entry to it.
CREATE INDEX payment_attempts_ref_idx ON payment_attempts (gateway_ref) WHERE gateway_ref IS NOT NULL;
