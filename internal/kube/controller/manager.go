package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	agentsv1 "github.com/zygo-run/zygo/internal/kube/api/agents/v1beta1"
	extv1 "github.com/zygo-run/zygo/internal/kube/api/extensions/v1beta1"
	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
)

// NewScheme returns a scheme with the core kinds and every kind the controller serves.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(s))
	utilruntime.Must(agentsv1.AddToScheme(s))
	utilruntime.Must(extv1.AddToScheme(s))
	utilruntime.Must(zygov1.AddToScheme(s))
	return s
}

// Config is the controller's configuration.
type Config struct {
	// Namespace holds the agents' token and CA Secrets (the controller's own namespace).
	Namespace string
	// RouteListen is the route's TCP address (":8080"); "" serves no route.
	RouteListen string
	// RouteAudiences, if set, are the audiences a caller's token must be for (e.g. a token of
	// `kubectl create token SA --audience zygo-route`); empty: the API server's own.
	RouteAudiences []string
	// RouteReviewsPerSecond and RouteReviewsInFlight bound the reviews of callers' tokens the
	// route has not cached (0: DefaultAuthReviewsPerSecond, DefaultAuthReviewsInFlight; the
	// burst is twice the rate); past them an uncached caller gets 429.
	RouteReviewsPerSecond float64
	RouteReviewsInFlight  int
	// MetricsListen and HealthListen are controller-runtime's (":8081"...); "0" disables.
	MetricsListen string
	HealthListen  string
	// LeaderElection makes replicas of the controller elect one active instance.
	LeaderElection bool
	// AgentSelector, when set, selects the node-agent pods in Namespace: each running one gets
	// a ZygoNode (AgentDiscovery) at POD_IP:AgentPort with Secret AgentTokenSecret's token
	// and, if AgentTLSSecret is set, that Secret's ca.crt for server name "zygo-node".
	AgentSelector    string
	AgentPort        int
	AgentTokenSecret string
	AgentTLSSecret   string
	// Sources is the address policy of Function sources (URL and OCI): loopback, link-local
	// and unspecified addresses are refused unless Sources.Allow holds them
	// (--source-allow-cidr); Sources.Deny refuses more (--source-deny-cidr).
	Sources SourcePolicy
	// Log receives the controller's and the route's logs.
	Log *slog.Logger
	// RouteReady, if not nil, receives the route's bound address once it accepts requests.
	RouteReady func(addr string)
}

// Run runs the reconcilers and the route against the API server of rc until ctx ends; it
// returns nil then, or the first error that stops it.
func Run(ctx context.Context, rc *rest.Config, cfg Config) error {
	if cfg.Namespace == "" {
		return errors.New("--namespace: the namespace of the agents' Secrets is required")
	}
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	ctrl.SetLogger(logr.FromSlogHandler(log.Handler()))
	scheme := NewScheme()
	var sel labels.Selector
	opts := cache.Options{}
	if cfg.AgentSelector != "" {
		var err error
		if sel, err = labels.Parse(cfg.AgentSelector); err != nil {
			return fmt.Errorf("--agent-selector %q: %w", cfg.AgentSelector, err)
		}
		// Only the agent pods are cached, not every pod of the cluster.
		opts.ByObject = map[client.Object]cache.ByObject{&corev1.Pod{}: {
			Namespaces: map[string]cache.Config{cfg.Namespace: {}}, Label: sel}}
	}
	mgr, err := ctrl.NewManager(rc, manager.Options{
		Cache:                   opts,
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: orDisabled(cfg.MetricsListen)},
		HealthProbeBindAddress:  orDisabled(cfg.HealthListen),
		LeaderElection:          cfg.LeaderElection,
		LeaderElectionID:        "zygo-controller.zygo.run",
		LeaderElectionNamespace: cfg.Namespace,
	})
	if err != nil {
		return fmt.Errorf("making the controller manager: %w", err)
	}
	if err := Setup(mgr, cfg); err != nil {
		return err
	}
	if sel != nil {
		d := &AgentDiscovery{Client: mgr.GetClient(), Namespace: cfg.Namespace, Selector: sel, Port: cfg.AgentPort,
			TokenRef: zygov1.SecretRef{Name: cfg.AgentTokenSecret, Key: "token"}}
		if cfg.AgentTLSSecret != "" {
			d.TLS = &zygov1.AgentTLS{CASecretRef: zygov1.SecretRef{Name: cfg.AgentTLSSecret, Key: "ca.crt"}, ServerName: "zygo-node"}
		}
		if err := d.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the agent discovery: %w", err)
		}
	}
	if cfg.HealthListen != "" && cfg.HealthListen != "0" {
		if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
			return fmt.Errorf("adding the health check: %w", err)
		}
	}
	if cfg.RouteListen != "" {
		rv, err := NewAPIReviewer(rc, cfg.RouteAudiences)
		if err != nil {
			return err
		}
		rt := &Route{Reader: mgr.GetClient(), Dialer: &SecretDialer{Reader: mgr.GetAPIReader(), Namespace: cfg.Namespace}, Log: log, Auth: rv,
			AuthReviewsPerSecond: cfg.RouteReviewsPerSecond, AuthReviewsBurst: int(2 * cfg.RouteReviewsPerSecond), AuthReviewsInFlight: cfg.RouteReviewsInFlight}
		if err := mgr.Add(routeRunnable(cfg.RouteListen, rt.Handler(), log, cfg.RouteReady)); err != nil {
			return fmt.Errorf("adding the route: %w", err)
		}
	}
	return mgr.Start(ctx)
}

// reconcileWorkers is how many objects the Sandbox and Function reconcilers each work on at
// once: their reconciles call node agents and fetch URLs (each call bounded, a create by
// createTimeout), so one slow node or hung URL holds one worker, not every object's.
const reconcileWorkers = 4

// Setup registers every reconciler with mgr. Secrets are read straight from the API server
// (mgr.GetAPIReader), so the controller caches no Secret of the cluster.
func Setup(mgr ctrl.Manager, cfg Config) error {
	// Strict: a field the schema does not know is refused, never dropped.
	c := client.WithFieldValidation(mgr.GetClient(), metav1.FieldValidationStrict)
	d := &SecretDialer{Reader: mgr.GetAPIReader(), Namespace: cfg.Namespace}
	secrets := secretReader{Client: c, api: mgr.GetAPIReader()}
	for _, r := range []interface{ SetupWithManager(ctrl.Manager) error }{
		&NodeReconciler{Client: c, Dialer: d},
		&SandboxReconciler{Client: secrets, Dialer: d, Namespace: cfg.Namespace},
		&ClaimReconciler{Client: c},
		&WarmPoolReconciler{Client: c, Dialer: d},
		&CheckpointReconciler{Client: c, Dialer: d},
		&ForkReconciler{Client: c, Dialer: d},
		&FunctionReconciler{Client: secrets, Dialer: d, HTTP: newFetchClient(fetchHeaderTimeout, &cfg.Sources)},
	} {
		if err := r.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up %T: %w", r, err)
		}
	}
	return nil
}

// secretReader is a client whose Gets of Secrets and ConfigMaps go to the API server, not
// the cache (the controller watches neither kind).
type secretReader struct {
	client.Client
	api client.Reader
}

func (s secretReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	switch obj.(type) {
	case *corev1.Secret, *corev1.ConfigMap:
		return s.api.Get(ctx, key, obj, opts...)
	}
	return s.Client.Get(ctx, key, obj, opts...)
}

// orDisabled returns addr, or "0" (controller-runtime's "off") when it is empty.
func orDisabled(addr string) string {
	if addr == "" {
		return "0"
	}
	return addr
}

// Timeouts of the route's server: a request (headers and its event, at most 6 MiB) is read
// within routeReadTimeout, so a slow body does not hold a connection; a kept-alive
// connection is closed after routeIdleTimeout without a request. The answer has no bound
// here: it takes as long as the function (its own timeout bounds it on the node).
var (
	routeReadTimeout = 30 * time.Second // a var for tests
	routeIdleTimeout = 120 * time.Second
)

// routeRunnable serves h on addr until the manager stops.
func routeRunnable(addr string, h http.Handler, log *slog.Logger, ready func(string)) manager.RunnableFunc {
	return func(ctx context.Context) error {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("route: listening on %s: %w", addr, err)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: routeReadTimeout, IdleTimeout: routeIdleTimeout}
		log.Info("route serving", "addr", l.Addr().String())
		if ready != nil {
			ready(l.Addr().String())
		}
		errc := make(chan error, 1)
		go func() { errc <- srv.Serve(l) }()
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return srv.Shutdown(sctx) //nolint:contextcheck // ctx is over: the shutdown needs its own deadline
		case err := <-errc:
			return fmt.Errorf("route: %w", err)
		}
	}
}
