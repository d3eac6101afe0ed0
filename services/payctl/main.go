// Command payctl is paysched's operator and client CLI.
package main

import (
	"fmt"
	"os"

	"github.com/paysched/paysched/pkg/cli"
)

func main() {
	if err := cli.New().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "payctl:", err)
		os.Exit(1)
	}
}
