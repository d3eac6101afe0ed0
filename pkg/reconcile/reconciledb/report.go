package reconciledb

import _ "embed"

// ReportTables makes the run's temporary tables, settle and matched, if
// the session has none yet: report.sql, which is also their schema for
// sqlc.
//
//go:embed report.sql
var ReportTables string
