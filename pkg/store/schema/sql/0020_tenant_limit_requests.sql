-- paysched schema, version 20: a tenant's weight and caps change from the
-- console only with a second operator's approval (issue 33). Each request
-- is a row; its approval applies it to tenant_limits in the same
-- transaction. The database refuses the requester as decider (a CHECK), as
-- for console_requests. (payctl tenants set, with an admin token, stays
-- direct: one operator's tool.)
CREATE TABLE tenant_limit_requests (
    id             bigint           GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant         text             NOT NULL CHECK (tenant <> '' AND length(tenant) <= 256),
    weight         integer          NOT NULL CHECK (weight BETWEEN 1 AND 1000),
    max_inflight   integer          CHECK (max_inflight > 0),
    max_rate       double precision CHECK (max_rate > 0 AND max_rate <= 1000000),
    reason         text             NOT NULL CHECK (reason <> '' AND length(reason) <= 500),
    requested_by   text             NOT NULL,
    requested_name text             NOT NULL,
    requested_at   timestamptz      NOT NULL DEFAULT now(),
    state          text             NOT NULL DEFAULT 'AWAITING_APPROVAL'
                                    CHECK (state IN ('AWAITING_APPROVAL', 'APPLIED', 'REJECTED')),
    decided_by     text,
    decided_name   text,
    decided_at     timestamptz,
    CHECK (decided_by IS NULL OR decided_by <> requested_by)
);
CREATE INDEX tenant_limit_requests_tenant_idx ON tenant_limit_requests (tenant, id);

GRANT SELECT, INSERT ON tenant_limit_requests TO paysched_admin;
GRANT UPDATE (state, decided_by, decided_name, decided_at) ON tenant_limit_requests TO paysched_admin;
