package server

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	admissionmetrics "k8s.io/apiserver/pkg/admission/metrics"
	"k8s.io/apiserver/pkg/admission/plugin/namespace/lifecycle"
	apiserverconfig "k8s.io/apiserver/pkg/apis/apiserver"
	apiserverinstall "k8s.io/apiserver/pkg/apis/apiserver/install"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/klog/v2"
	netutils "k8s.io/utils/net"

	"github.com/terrarun/terrarun/pkg/admission/initializer"
	"github.com/terrarun/terrarun/pkg/standalone"
)

// standaloneBindAddress is where standalone mode listens unless --bind-address
// is given.
const standaloneBindAddress = "127.0.0.1"

// standaloneConfig is what standalone mode starts before the server is
// configured.
type standaloneConfig struct {
	pki     *standalone.PKI
	etcd    *standalone.Etcd
	serving *genericoptions.SecureServingOptionsWithLoopback
	// unlock releases the data directory.
	unlock func()
}

// startStandalone creates and locks the data directory, creates the CA and
// the serving certificate, and starts embedded etcd. It touches nothing in
// a data directory that another server holds.
func (o *Options) startStandalone(ctx context.Context) (_ *standaloneConfig, err error) {
	if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating --data-dir %s: %w", o.DataDir, err)
	}
	unlock, err := standalone.LockDataDir(o.DataDir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			unlock()
		}
	}()
	pki, err := standalone.LoadOrCreatePKI(filepath.Join(o.DataDir, "pki"))
	if err != nil {
		return nil, err
	}

	serving := *o.Recommended.SecureServing
	inner := *serving.SecureServingOptions
	serving.SecureServingOptions = &inner
	if !o.bindAddressSet {
		inner.BindAddress = netutils.ParseIPSloppy(standaloneBindAddress)
	}
	if inner.ServerCert.CertKey.CertFile == "" {
		hosts := []string{"localhost"}
		ips := []net.IP{netutils.ParseIPSloppy("127.0.0.1"), net.IPv6loopback}
		if !inner.BindAddress.IsUnspecified() && !inner.BindAddress.IsLoopback() {
			ips = append(ips, inner.BindAddress)
		}
		cert, key, err := pki.ServingCert(hosts, ips)
		if err != nil {
			return nil, err
		}
		inner.ServerCert.CertKey.CertFile, inner.ServerCert.CertKey.KeyFile = cert, key
	}

	// Mutual TLS with a CA of etcd's own: stages share the host's network.
	etcd, err := standalone.StartEtcd(ctx, filepath.Join(o.DataDir, "etcd"),
		standalone.WithClientCertAuth(filepath.Join(o.DataDir, "pki", "etcd")), standalone.WithQuota(o.EtcdQuotaBytes))
	if err != nil {
		return nil, err
	}
	// Where to point etcdctl (or a benchmark) at it, with its client certificate.
	t := etcd.ClientTLS()
	klog.InfoS("Embedded etcd is serving", "url", etcd.ClientURL(), "cacert", t.CAFile, "cert", t.CertFile, "key", t.KeyFile)
	return &standaloneConfig{pki: pki, etcd: etcd, serving: &serving, unlock: unlock}, nil
}

// standaloneOptions returns a copy of the recommended options for standalone
// mode: the embedded etcd e, and none of the options that need a
// cluster. Authentication, authorization and admission are set up by
// applyStandalone instead, and there is no core API for informers or priority
// and fairness.
func (o *Options) standaloneOptions(e *standalone.Etcd) *genericoptions.RecommendedOptions {
	r := *o.Recommended
	etcd := *r.Etcd
	etcd.StorageConfig.Transport.ServerList = []string{e.ClientURL()}
	if t := e.ClientTLS(); t != nil {
		etcd.StorageConfig.Transport.CertFile, etcd.StorageConfig.Transport.KeyFile, etcd.StorageConfig.Transport.TrustedCAFile = t.CertFile, t.KeyFile, t.CAFile
	}
	// No garbage collector runs without a cluster: foreground or orphan
	// deletion would wait forever for one to remove its finalizer.
	etcd.EnableGarbageCollection = false
	r.Etcd = &etcd
	r.Authentication = nil
	r.Authorization = nil
	r.CoreAPI = nil
	r.Admission = nil
	features := *r.Features
	features.EnablePriorityAndFairness = false
	r.Features = &features
	return &r
}

// applyStandalone authenticates client certificates signed by the data
// directory's CA, authorizes them by their groups with terrarun's roles
// (standalone.NewAuthorizer), builds the admission
// chain, and writes the admin kubeconfig. It returns the kubeconfig's path,
// and what lists a user's rules (`kubectl auth can-i --list`).
func (o *Options) applyStandalone(config *genericapiserver.RecommendedConfig, sa *standaloneConfig, runs initializer.RunGetter) (string, authorizer.RuleResolver, error) {
	ca, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca", sa.pki.CAFile())
	if err != nil {
		return "", nil, fmt.Errorf("loading the standalone CA: %w", err)
	}
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                          &apiserverconfig.AnonymousAuthConfig{Enabled: false},
		ClientCertificateCAContentProvider: ca,
	}.New()
	if err != nil {
		return "", nil, fmt.Errorf("building the client-certificate authenticator: %w", err)
	}
	config.Authentication.Authenticator = authn
	if err := config.Authentication.ApplyClientCert(ca, config.SecureServing); err != nil {
		return "", nil, fmt.Errorf("requesting client certificates: %w", err)
	}
	authz, err := standalone.NewAuthorizer()
	if err != nil {
		return "", nil, err
	}
	config.Authorization.Authorizer = authz

	if err := applyStandaloneAdmission(config, o.Recommended.Admission, o.AdmissionPolicyDir, runs); err != nil {
		return "", nil, err
	}

	addr := config.SecureServing.Listener.Addr().(*net.TCPAddr)
	host := addr.IP.String()
	if addr.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	server := "https://" + net.JoinHostPort(host, fmt.Sprint(addr.Port))
	path := filepath.Join(o.DataDir, standalone.AdminKubeconfigFile)
	if err := sa.pki.WriteKubeconfig(path, server, standalone.AdminUser, standalone.AdminGroups); err != nil {
		return "", nil, err
	}
	return path, authz, nil
}

// admissionConfigScheme decodes AdmissionConfiguration files.
var admissionConfigScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	apiserverinstall.Install(s)
	return s
}()

// applyStandaloneAdmission builds the admission chain of standalone mode. The
// generic AdmissionOptions.ApplyTo needs a Kubernetes client and informers,
// which standalone mode does not have; terrarun's plugins need neither. It
// honours --enable-admission-plugins, --disable-admission-plugins and
// --admission-control-config-file as cluster mode does. NamespaceLifecycle
// needs the cluster's namespaces and is left out; the admission policy
// plugins run with the policies of policyDir, and not without it.
func applyStandaloneAdmission(c *genericapiserver.RecommendedConfig, a *genericoptions.AdmissionOptions, policyDir string, runs initializer.RunGetter) error {
	var names []string
	for _, name := range a.RecommendedPluginOrder {
		if name != lifecycle.PluginName && !slices.Contains(a.DisablePlugins, name) &&
			(!a.DefaultOffPlugins.Has(name) || slices.Contains(a.EnablePlugins, name)) &&
			(policyDir != "" || !slices.Contains(admissionPolicyPlugins, name)) {
			names = append(names, name)
		}
	}
	read, err := admission.ReadAdmissionConfiguration(names, a.ConfigFile, admissionConfigScheme)
	if err != nil {
		return fmt.Errorf("reading --admission-control-config-file: %w", err)
	}
	provider := policyDirConfig{ConfigProvider: read, dir: policyDir}
	initializers := admission.PluginInitializers{initializer.NewInitializer(initializer.NameOnlyNamespaceLabeler{}, runs)}
	if policyDir != "" {
		initializers = append(initializers, noClusterInitializer(c)...)
	}
	chain, err := a.Plugins.NewFromPlugins(names, provider, initializers, a.Decorators)
	if err != nil {
		return err
	}
	c.AdmissionControl = admissionmetrics.WithStepMetrics(chain)
	return nil
}
