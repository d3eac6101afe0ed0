-- paysched schema, version 6: audit_events keyed by the change itself.
-- (lsn, table_name, row_key) identifies a change and was already unique;
-- the identity id beside it cost every insert a sequence step, a third
-- index entry and 8 bytes, and nothing reads it. The change's key becomes
-- the primary key (order by lsn for the log's order). Re-keying rebuilds that
-- index once, holding audit_events meanwhile: the consumer just waits.
ALTER TABLE audit_events DROP COLUMN id;
ALTER TABLE audit_events DROP CONSTRAINT audit_events_lsn_table_name_row_key_key;
ALTER TABLE audit_events ADD CONSTRAINT audit_events_pkey PRIMARY KEY (lsn, table_name, row_key);
