package standalone

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Names used in generated kubeconfig files.
const (
	// AdminKubeconfigFile is the admin kubeconfig's name in the data directory.
	AdminKubeconfigFile = "admin.kubeconfig"
	// AdminUser is the user of the admin kubeconfig.
	AdminUser    = "terrarun-admin"
	contextName  = "terrarun"
	clusterName  = "terrarun"
	certValidity = 365 * 24 * time.Hour
)

// AdminGroups are the groups of the admin user.
var AdminGroups = []string{"system:masters"}

// WriteKubeconfig writes a kubeconfig for server that authenticates as user
// with groups through a client certificate signed by the CA.
func (p *PKI) WriteKubeconfig(path, server, user string, groups []string) error {
	certPEM, keyPEM, err := p.ClientCert(user, groups, certValidity)
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[clusterName] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: p.CAPEM()}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts[contextName] = &clientcmdapi.Context{Cluster: clusterName, AuthInfo: user, Namespace: "default"}
	cfg.CurrentContext = contextName
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("encoding the kubeconfig: %w", err)
	}
	return writeFileAtomic(path, data, 0o600)
}

// MintKubeconfig writes a kubeconfig for another user of the standalone server
// whose data directory is dataDir. The server address is read from the admin
// kubeconfig, so the server must have started at least once.
func MintKubeconfig(dataDir, path, user string, groups []string) error {
	admin := filepath.Join(dataDir, AdminKubeconfigFile)
	cfg, err := clientcmd.LoadFromFile(admin)
	if err != nil {
		return fmt.Errorf("reading %s (start the server once with --standalone --data-dir %s first): %w", admin, dataDir, err)
	}
	cluster, ok := cfg.Clusters[clusterName]
	if !ok || cluster.Server == "" {
		return errors.New(admin + " has no terrarun cluster entry; delete it and restart the server to regenerate it")
	}
	p, err := LoadOrCreatePKI(filepath.Join(dataDir, "pki"))
	if err != nil {
		return err
	}
	return p.WriteKubeconfig(path, cluster.Server, user, groups)
}
