// Command zygo is the Zygo CLI and daemon. It parses nothing itself; see
// internal/cli.
package main

import (
	"os"

	"github.com/zygo-run/zygo/internal/cli"
)

func main() { os.Exit(cli.Execute()) }
