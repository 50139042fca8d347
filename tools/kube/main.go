// Command kube-testenv is a real kube-apiserver and a real etcd in one executable, for the
// Kubernetes tests (controller-runtime's envtest starts them as two processes). It runs as
// the program its name says: scripts/kube-testenv.sh links it as kube-apiserver and as etcd
// in one directory, the directory envtest's KUBEBUILDER_ASSETS names.
//
// One executable, not two: the two programs share most of their dependencies (gRPC, the etcd
// client, protobuf, Prometheus), so one link instead of two saves minutes of a cold build on
// a small machine, and half the disk. Both are the upstream programs unchanged: kube-apiserver
// is k8s.io/kubernetes/cmd/kube-apiserver's main (its command and its side-effect imports),
// etcd is go.etcd.io/etcd/server/v3/etcdmain.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	_ "time/tzdata" // kube-apiserver's main imports it, for the time zones of CronJobs

	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // kube-apiserver's --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // kube-apiserver's client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // kube-apiserver's version metric
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	switch name := filepath.Base(os.Args[0]); name {
	case "kube-apiserver":
		os.Exit(cli.Run(app.NewAPIServerCommand()))
	case "etcd":
		etcdmain.Main(os.Args)
	default:
		fmt.Fprintf(os.Stderr, "kube-testenv: run as kube-apiserver or etcd (a link of that name), not as %q\n", name)
		os.Exit(2)
	}
}
