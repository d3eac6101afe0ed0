-- paysched schema, version 4: find attempts nobody will finish.
-- An executor can write its attempt row just after the reaper took the
-- lease back, then die; the reaper closes such rows (see pkg/reaper).
CREATE INDEX payment_attempts_open_idx ON payment_attempts (started_at) WHERE finished_at IS NULL;
