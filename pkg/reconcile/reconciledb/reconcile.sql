-- The reconciler's own statements outside the money moves (those are
-- pkg/store's), generated into Go by sqlc (make sqlc).

-- name: LastSucceeded :one
-- When the last successful run finished (no row: none yet; one run a day).
SELECT finished_at FROM reconciliation_runs WHERE state = @state AND finished_at IS NOT NULL
ORDER BY finished_at DESC LIMIT 1;

-- name: RecordWebhookEvent :execrows
-- A gateway webhook seen once: a redelivery inserts nothing.
INSERT INTO webhook_events (event_id, charge_key) VALUES (@event_id, @charge_key) ON CONFLICT DO NOTHING;
