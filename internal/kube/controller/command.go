package controller

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
)

// NewCommand returns the zygo-controller command: flags, then Run until SIGTERM or SIGINT.
func NewCommand() *cobra.Command {
	var cfg Config
	var kubeconfig, logLevel string
	var allowCIDRs, denyCIDRs []string
	cmd := &cobra.Command{
		Use:   "zygo-controller",
		Short: "Place Zygo sandboxes and functions on the node agents of a Kubernetes cluster",
		Long: "zygo-controller reconciles Sandbox, SandboxTemplate, SandboxClaim, SandboxWarmPool (agents.x-k8s.io) and " +
			"ZygoNode, Checkpoint, SandboxFork, Function (zygo.run) into calls on the node agents (zygo serve), " +
			"and serves POST /functions/NAMESPACE/NAME/invoke. docs/kubernetes.md is the design.",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var lv slog.Level
			if err := lv.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level %q: must be debug, info, warn or error", logLevel)
			}
			var err error
			if cfg.Sources.Allow, err = ParseCIDRs("--source-allow-cidr", allowCIDRs); err != nil {
				return err
			}
			if cfg.Sources.Deny, err = ParseCIDRs("--source-deny-cidr", denyCIDRs); err != nil {
				return err
			}
			cfg.Log = slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: lv}))
			var rc *rest.Config
			if kubeconfig != "" {
				rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
			} else {
				rc, err = ctrl.GetConfig()
			}
			if err != nil {
				return fmt.Errorf("finding the API server (--kubeconfig, KUBECONFIG or in-cluster): %w", err)
			}
			return Run(ctrl.SetupSignalHandler(), rc, cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then the in-cluster service account)")
	f.StringVar(&cfg.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "namespace of the node agents' token and CA Secrets (default $POD_NAMESPACE)")
	f.StringVar(&cfg.RouteListen, "route-listen", ":8080", "TCP address of the function route (POST /functions/NAMESPACE/NAME/invoke); empty: none")
	f.StringSliceVar(&cfg.RouteAudiences, "route-audience", nil, "audience a route caller's token must be for (repeatable; e.g. zygo-route with `kubectl create token SA --audience zygo-route`); default: the API server's")
	f.Float64Var(&cfg.RouteReviewsPerSecond, "route-reviews-per-second", DefaultAuthReviewsPerSecond, "reviews (TokenReview + SubjectAccessReview) the route starts per second per client address for callers it has not cached (bursts of twice as many); beyond them such a caller gets 429")
	f.IntVar(&cfg.RouteReviewsInFlight, "route-reviews-in-flight", DefaultAuthReviewsInFlight, "reviews of uncached callers the route has under way at once, all addresses together (one address holds at most a quarter); beyond them such a caller gets 429")
	f.StringVar(&cfg.MetricsListen, "metrics-listen", "", "controller-runtime's Prometheus metrics address; empty: none")
	f.StringVar(&cfg.HealthListen, "health-listen", "", "address of /healthz and /readyz; empty: none")
	f.BoolVar(&cfg.LeaderElection, "leader-elect", false, "elect one active controller among replicas (a Lease in --namespace)")
	f.StringVar(&cfg.AgentSelector, "agent-selector", "", "label selector of the node-agent pods in --namespace; each running one gets a ZygoNode (empty: ZygoNodes are made by hand)")
	f.IntVar(&cfg.AgentPort, "agent-port", 7443, "the node agents' --listen port, for --agent-selector")
	f.StringVar(&cfg.AgentTokenSecret, "agent-token-secret", "zygo-node-token", "Secret (key token) with the agents' API token, for --agent-selector")
	f.StringVar(&cfg.AgentTLSSecret, "agent-tls-secret", "zygo-node-tls", "Secret (key ca.crt) the agents' certificates verify against, for --agent-selector; empty: plain HTTP")
	f.StringSliceVar(&allowCIDRs, "source-allow-cidr", nil, "CIDR (or address) a Function's URL or OCI source may be fetched from although refused by default (loopback, link-local incl. 169.254.169.254, unspecified) or by --source-deny-cidr (repeatable or comma-separated)")
	f.StringSliceVar(&denyCIDRs, "source-deny-cidr", nil, "CIDR (or address) a Function's URL or OCI source may not be fetched from, besides loopback, link-local and unspecified (repeatable or comma-separated; e.g. the cluster's pod and service ranges)")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
}
