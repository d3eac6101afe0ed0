-- The reconciliation's two temporary tables, made per run on its own
-- session: sqlc reads this file as their schema (sqlc.yaml), and the
-- reconciler runs it (ReportTables) before loading the day's report.
-- Temporary, so two runs on two sessions never see each other's, and they
-- go with the session whatever happens.

-- settle is the gateway's settlement report of the day, copied in.
CREATE TEMP TABLE IF NOT EXISTS settle (
    charge_id text NOT NULL, reference text NOT NULL, ref_id uuid,
    amount bigint NOT NULL, currency text NOT NULL, created_at timestamptz NOT NULL);

-- matched pairs each charged reference (its lowest charge id) with its
-- payment, if any (pkg/store's MatchSettled fills it).
CREATE TEMP TABLE IF NOT EXISTS matched (
    charge_id text NOT NULL, reference text NOT NULL, amount bigint NOT NULL, currency text NOT NULL,
    pid uuid, due_time timestamptz, status text, attempt int, amount_minor bigint, pcurrency text);
