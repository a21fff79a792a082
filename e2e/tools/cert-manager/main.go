// Command cert-manager runs one of cert-manager's three components from the real
// github.com/cert-manager/cert-manager packages: the controller (Certificates, CA and
// self-signed issuers), the webhook (validation and defaulting of cert-manager resources,
// serving a certificate from its own dynamic CA) or the cainjector (CA bundles into webhook
// configurations and CRDs). It replaces the upstream commands' wiring only (flags, startup),
// which live in modules the Go module proxy does not serve; see go.mod.
//
// It takes the upstream Helm chart's arguments (--name=value) so that the chart in
// deploy/charts/cert-manager installs it unchanged; arguments it has no use for are ignored.
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	apiext "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	apireg "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	configshared "github.com/cert-manager/cert-manager/internal/apis/config/shared"
	configwebhook "github.com/cert-manager/cert-manager/internal/apis/config/webhook"
	"github.com/cert-manager/cert-manager/internal/webhook"
	cmscheme "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/scheme"
	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/util"

	// The controllers this build runs: Certificates end to end, and the CA and self-signed
	// issuers (no ACME, Vault or Venafi: nothing here can reach them).
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// args are the --name=value (or --name value) arguments given after the component name.
type args map[string]string

func parseArgs(list []string) args {
	out := args{}
	for i := 0; i < len(list); i++ {
		a := strings.TrimLeft(list[i], "-")
		if k, v, ok := strings.Cut(a, "="); ok {
			out[k] = v
		} else if i+1 < len(list) && !strings.HasPrefix(list[i+1], "-") {
			out[a] = list[i+1]
			i++
		} else {
			out[a] = "true"
		}
	}
	return out
}

func (a args) get(name, fallback string) string {
	if v, ok := a[name]; ok && v != "" {
		return os.ExpandEnv(v)
	}
	return fallback
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: cert-manager controller|webhook|cainjector [--flag=value ...]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log := klog.NewKlogr()
	ctx = logf.NewContext(ctx, log, os.Args[1])
	a := parseArgs(os.Args[2:])
	var err error
	switch os.Args[1] {
	case "controller":
		err = runController(ctx, a)
	case "webhook":
		err = runWebhook(ctx, a)
	case "cainjector":
		err = runCAInjector(ctx, a)
	default:
		err = fmt.Errorf("unknown component %q (controller, webhook or cainjector)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cert-manager:", err)
		os.Exit(1)
	}
}

// serveHealth answers the chart's liveness probe (/livez) once the component runs.
func serveHealth(ctx context.Context, addr string) {
	mux := http.NewServeMux()
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	go func() { _ = srv.ListenAndServe() }()
}

func runController(ctx context.Context, a args) error {
	opts := controllerpkg.ContextOptions{
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		IssuerOptions: controllerpkg.IssuerOptions{
			ClusterResourceNamespace: a.get("cluster-resource-namespace", "cert-manager"),
		},
		CertificateOptions: controllerpkg.CertificateOptions{
			CopiedAnnotationPrefixes:                 []string{"*", "-kubectl.kubernetes.io/"},
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
		SchedulerOptions: controllerpkg.SchedulerOptions{MaxConcurrentChallenges: 60},
	}
	factory, err := controllerpkg.NewContextFactory(ctx, opts)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(controllerpkg.Known()))
	for name, construct := range controllerpkg.Known() {
		c, err := construct(factory)
		if err != nil {
			return fmt.Errorf("controller %s: %w", name, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Run(5, ctx); err != nil {
				errs <- fmt.Errorf("controller %s: %w", name, err)
			}
		}()
	}
	// The informer factories are shared by every controller's context.
	shared, err := factory.Build("informers")
	if err != nil {
		return err
	}
	shared.SharedInformerFactory.Start(ctx.Done())
	shared.KubeSharedInformerFactory.Start(ctx.Done())
	shared.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
	serveHealth(ctx, ":9403")
	select {
	case err := <-errs:
		return err
	case <-ctx.Done():
	}
	wg.Wait()
	return nil
}

func runWebhook(ctx context.Context, a args) error {
	var port, healthz int32 = 10250, 6080
	_, _ = fmt.Sscan(a.get("secure-port", "10250"), &port)
	_, _ = fmt.Sscan(a.get("healthz-port", "6080"), &healthz)
	cfg := configwebhook.WebhookConfiguration{
		SecurePort:  port,
		HealthzPort: healthz,
		TLSConfig: configshared.TLSConfig{
			Dynamic: configshared.DynamicServingConfig{
				SecretNamespace: a.get("dynamic-serving-ca-secret-namespace", "cert-manager"),
				SecretName:      a.get("dynamic-serving-ca-secret-name", "cert-manager-webhook-ca"),
				DNSNames:        strings.Split(a.get("dynamic-serving-dns-names", "cert-manager-webhook"), ","),
				LeafDuration:    7 * 24 * time.Hour,
			},
		},
		MetricsListenAddress: "0",
	}
	srv, err := webhook.NewCertManagerWebhookServer(logf.FromContext(ctx), cfg)
	if err != nil {
		return err
	}
	return srv.Run(ctx)
}

func runCAInjector(ctx context.Context, _ args) error {
	scheme := runtime.NewScheme()
	utilruntime.Must(kscheme.AddToScheme(scheme))
	utilruntime.Must(cmscheme.AddToScheme(scheme))
	utilruntime.Must(apiext.AddToScheme(scheme))
	utilruntime.Must(apireg.AddToScheme(scheme))
	ctrl.SetLogger(logf.FromContext(ctx))
	// The user agent names the field manager of the CA bundles it applies.
	restConfig := util.RestConfigWithUserAgent(ctrl.GetConfigOrDie(), "cainjector")
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: ":9402",
	})
	if err != nil {
		return err
	}
	if err := cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			"mutatingwebhookconfiguration":   true,
			"validatingwebhookconfiguration": true,
			"apiservice":                     true,
			"customresourcedefinition":       true,
		},
	}); err != nil {
		return err
	}
	serveHealth(ctx, ":9403")
	return mgr.Start(ctx)
}
