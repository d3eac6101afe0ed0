// Package config binds command-line flags to PAYSCHED_* environment
// variables, so every service is configured the same way: a flag wins, then
// its environment variable, then the built-in local default.
package config

import (
	"crypto/x509"
	"flag"
	"fmt"
	"os"
	"strings"
)

// EnvName returns the environment variable for a flag: "http-addr" becomes
// PAYSCHED_HTTP_ADDR.
func EnvName(flagName string) string {
	return "PAYSCHED_" + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(flagName))
}

// Parse parses args into fs, then fills every flag not given on the command
// line from its PAYSCHED_* environment variable. Usage text names the
// variables.
func Parse(fs *flag.FlagSet, args []string) error {
	fs.VisitAll(func(f *flag.Flag) {
		f.Usage = fmt.Sprintf("%s (env %s)", f.Usage, EnvName(f.Name))
	})
	if err := fs.Parse(args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []string
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] {
			return
		}
		if v, ok := os.LookupEnv(EnvName(f.Name)); ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Sprintf("%s=%q: %v", EnvName(f.Name), v, err))
			}
		}
	})
	if len(errs) > 0 {
		return fmt.Errorf("config: %s", strings.Join(errs, "; "))
	}
	return nil
}

// ReadSecret reads a secret from a file (the --*-file flags), trimming the
// whitespace an editor or a Kubernetes Secret leaves around it; empty is an
// error. The secret never appears in an error, only the file's name.
func ReadSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return s, nil
}

// ReadCertPool reads a PEM CA bundle (the --*-ca-file flags) into a pool of
// its own: the peer must chain to it, not to the system's roots.
func ReadCertPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}
