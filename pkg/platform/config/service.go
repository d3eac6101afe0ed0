package config

import (
	"flag"
	"log/slog"
)

// LocalDatabaseURL is the local stack's schedule (make up), every
// database-backed service's default.
const LocalDatabaseURL = "postgres://postgres@127.0.0.1:55432/paysched?sslmode=disable"

// Service is what every database-backed service's flags share: --dev and
// the URL of the database it runs on.
type Service struct {
	*Mode
	// DB is the database flag's value.
	DB     *string
	dbFlag string
}

// RegisterService adds --dev and the service's database flag (dbFlag,
// e.g. "database-url", with its default and usage) to fs.
func RegisterService(fs *flag.FlagSet, dbFlag, dbDefault, usage string) *Service {
	return &Service{Mode: RegisterMode(fs), DB: fs.String(dbFlag, dbDefault, usage), dbFlag: dbFlag}
}

// Start is every service's first step: it announces the mode and checks
// the database URL for it.
func (s *Service) Start(log *slog.Logger) error {
	s.Announce(log)
	return s.Mode.DatabaseURL("--"+s.dbFlag, *s.DB)
}
