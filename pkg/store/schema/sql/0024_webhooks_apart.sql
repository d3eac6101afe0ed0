-- paysched schema, version 24: the webhooks move to a database of their
-- own (webhooksql/, migrate --webhooks-database-url; docs/DESIGN.md,
-- "Where the webhooks live"). The tables version 23 made here move out of
-- the way, into the schema webhooks_v1, which no service role may use:
-- migrate copies their endpoints into the webhooks' database (idempotent),
-- and the owner drops the schema once that is checked. Moved, not
-- dropped: the endpoints hold their tenants' secrets.
CREATE SCHEMA webhooks_v1;
ALTER TABLE webhook_attempts SET SCHEMA webhooks_v1;
ALTER TABLE webhook_deliveries SET SCHEMA webhooks_v1;
ALTER TABLE webhook_endpoints SET SCHEMA webhooks_v1;
DROP FUNCTION paysched_webhook_rotate(uuid, text, text, interval);
-- The fan-out no longer reads whose a payment is: the notification says.
REVOKE SELECT (id, tenant) ON payment_index FROM paysched_webhooks;
