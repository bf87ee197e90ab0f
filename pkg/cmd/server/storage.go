package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/server/options/encryptionconfig"
	"k8s.io/apiserver/pkg/storage/value"
	"k8s.io/client-go/transport"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/artifacts"
)

// newEtcdClient connects to the etcd that holds the objects, for artifacts,
// execution records and leader election.
func newEtcdClient(o *genericoptions.EtcdOptions) (*clientv3.Client, error) {
	t := o.StorageConfig.Transport
	var tlsConfig *tls.Config
	if t.CertFile != "" || t.KeyFile != "" || t.TrustedCAFile != "" {
		cfg, err := transport.TLSConfigFor(&transport.Config{TLS: transport.TLSConfig{CertFile: t.CertFile, KeyFile: t.KeyFile, CAFile: t.TrustedCAFile}})
		if err != nil {
			return nil, fmt.Errorf("loading etcd client certificates: %w", err)
		}
		tlsConfig = cfg
	}
	return clientv3.New(clientv3.Config{
		Endpoints:   t.ServerList,
		TLS:         tlsConfig,
		DialTimeout: 20 * time.Second,
		Logger:      zap.NewNop(),
	})
}

// artifactTransformer returns the value transformer for artifacts: the one
// the encryption configuration names for terraformruns.terrarun.dev, so that
// plan files and outputs are encrypted at rest exactly when the objects are.
func artifactTransformer(ctx context.Context, o *genericoptions.EtcdOptions) (value.Transformer, error) {
	path := o.EncryptionProviderConfigFilepath
	if path == "" {
		return nil, nil
	}
	cfg, err := encryptionconfig.LoadEncryptionConfig(ctx, path, false, "terrarun-apiserver")
	if err != nil {
		return nil, fmt.Errorf("loading --encryption-provider-config for artifacts: %w", err)
	}
	if t, ok := cfg.Transformers[terrarun.Resource("terraformruns")]; ok {
		return t, nil
	}
	return nil, fmt.Errorf("--encryption-provider-config has no entry for terraformruns.terrarun.dev: add it to encrypt runs and their plans, logs and outputs")
}

func newArtifactStore(ctx context.Context, etcd *genericoptions.EtcdOptions, o *ExecutorOptions, a *ArtifactStoreOptions, client *clientv3.Client) (*artifacts.Store, error) {
	t, err := artifactTransformer(ctx, etcd)
	if err != nil {
		return nil, err
	}
	objects, err := a.objects()
	if err != nil {
		return nil, err
	}
	return artifacts.New(client, artifacts.Options{
		Objects:     objects,
		Transformer: t,
		Retention:   o.ArtifactRetention,
		Limits: artifacts.Limits{Log: o.MaxLogBytes, PlanText: o.MaxPlanBytes, PlanJSON: o.MaxPlanBytes,
			RunLogs: o.MaxRunLogBytes, NamespaceLogs: o.MaxNamespaceLogBytes, TotalLogs: o.MaxTotalLogBytes},
	}), nil
}
