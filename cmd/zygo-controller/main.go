// Command zygo-controller is Zygo's Kubernetes controller (internal/kube/controller; the
// design is docs/kubernetes.md).
package main

import (
	"os"

	"github.com/zygo-run/zygo/internal/kube/controller"
)

func main() {
	if err := controller.NewCommand().Execute(); err != nil {
		os.Exit(1)
	}
}
