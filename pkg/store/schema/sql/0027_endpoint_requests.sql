-- paysched schema, version 27: an operator's rotation of a webhook
-- endpoint's secret, and recovery of its failed messages, take a second
-- admin too (issue 47). A leaked admin token that could rotate a tenant's
-- secret could sign events the tenant trusts (a payment completed); one
-- that could recover could flood its endpoint. Each is a request here,
-- beside the payments' (console_requests), applied by the approval: the
-- new secret is made then, and shown to the approver once.
CREATE TABLE endpoint_requests (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    action          text        NOT NULL CHECK (action IN ('ROTATE', 'RECOVER')),
    endpoint_id     uuid        NOT NULL,
    -- ROTATE: how long the old secret keeps signing (0: 24 hours).
    overlap_seconds bigint      NOT NULL DEFAULT 0 CHECK (overlap_seconds BETWEEN 0 AND 604800),
    -- RECOVER: the failed messages noted in [since, until).
    since           timestamptz,
    until           timestamptz,
    reason          text        NOT NULL CHECK (reason <> '' AND length(reason) <= 500),
    requested_by    text        NOT NULL,
    requested_name  text        NOT NULL,
    requested_at    timestamptz NOT NULL DEFAULT now(),
    state           text        NOT NULL DEFAULT 'AWAITING_APPROVAL'
                                CHECK (state IN ('AWAITING_APPROVAL', 'APPLIED', 'NOT_APPLIED', 'REJECTED', 'EXPIRED')),
    decided_by      text,
    decided_name    text,
    decided_at      timestamptz,
    expires_at      timestamptz NOT NULL,
    -- What the application did: messages recovered, or why it did not apply (NOT_APPLIED).
    recovered       bigint,
    error           text,
    CHECK ((action = 'RECOVER') = (since IS NOT NULL)),
    -- Four eyes, in the database too.
    CHECK (decided_by IS NULL OR decided_by <> requested_by),
    CHECK (state IN ('AWAITING_APPROVAL', 'EXPIRED') OR decided_by IS NOT NULL)
);
CREATE INDEX endpoint_requests_open_idx ON endpoint_requests (id) WHERE state = 'AWAITING_APPROVAL';
CREATE INDEX endpoint_requests_endpoint_idx ON endpoint_requests (endpoint_id, id);
GRANT SELECT, INSERT ON endpoint_requests TO paysched_admin;
GRANT UPDATE (state, decided_by, decided_name, decided_at, recovered, error) ON endpoint_requests TO paysched_admin;
