// Command devcerts makes the local stack's development TLS material with
// pkg/platform/devtls: a CA (kept and reused in --dir), a certificate for
// --name valid for --hosts, and a bearer token file. For development
// machines only.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/paysched/paysched/pkg/platform/devtls"
)

func main() {
	fs := flag.NewFlagSet("devcerts", flag.ExitOnError)
	dir := fs.String("dir", ".data/tls", "directory of the CA and the certificates")
	name := fs.String("name", "", "certificate (and token) name, e.g. gateway-sim")
	hosts := fs.String("hosts", "127.0.0.1,localhost", "comma-separated DNS names and IP addresses the certificate is valid for")
	_ = fs.Parse(os.Args[1:])
	if *name == "" {
		fmt.Fprintln(os.Stderr, "devcerts: --name is required")
		os.Exit(2)
	}
	f, err := devtls.Prepare(*dir, *name, strings.Split(*hosts, ","))
	if err != nil {
		fmt.Fprintln(os.Stderr, "devcerts:", err)
		os.Exit(1)
	}
	fmt.Printf("ca=%s cert=%s key=%s token=%s\n", f.CAFile, f.CertFile, f.KeyFile, f.TokenFile)
}
