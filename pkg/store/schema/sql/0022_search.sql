-- paysched schema, version 22: the console searches by tenant, by
-- currency and amount, and by gateway ref, each on an index, and walks the failed payments by due
-- time (issue 33).
--
-- payment_index learns each payment's tenant at create, as it learned the
-- payee in version 14: it is written once, never updated on the engine's
-- path, so the index costs the create one entry and the spike nothing.
-- So do its currency and amount: a search by currency walks that
-- currency's payments by due time, and an amount range is checked on the
-- index entries (INCLUDE), before any payment is read.
ALTER TABLE payment_index ADD COLUMN tenant text, ADD COLUMN currency text, ADD COLUMN amount_minor bigint;
UPDATE payment_index i SET tenant = p.tenant, currency = p.currency, amount_minor = p.amount_minor
FROM payments p WHERE p.id = i.id AND p.due_time = i.due_time;
CREATE INDEX payment_index_tenant_due ON payment_index (tenant, due_time, id) WHERE tenant IS NOT NULL;
CREATE INDEX payment_index_currency_due ON payment_index (currency, due_time, id) INCLUDE (amount_minor)
    WHERE currency IS NOT NULL;

-- A gateway ref is found through the attempt that got it: one probe of an
-- unpartitioned table, whatever the payment's day. The attempt's
-- completion is not a HOT update already (it changes finished_at, in
-- payment_attempts_open_idx's predicate), so this adds one entry to it.
CREATE INDEX payment_attempts_ref_idx ON payment_attempts (gateway_ref) WHERE gateway_ref IS NOT NULL;

-- The failed payments by due time, as the dead letters have had since
-- version 5: a search for a failure reason (2% of a day's rows) walks
-- them instead of a day's payment_index. A row enters it once, when it
-- fails (the move is not HOT already: status is indexed), and never leaves.
CREATE INDEX payments_failed_idx ON payments (due_time, id) WHERE status = 'FAILED';
