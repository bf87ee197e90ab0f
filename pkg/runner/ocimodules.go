package runner

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// systemCABundles are where Debian, Fedora and Alpine keep the system's CA
// bundle, which an engine's SSL_CERT_FILE replaces.
var systemCABundles = []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"}

// ociModuleEnv adds to env what OpenTofu needs to install oci:// modules
// from the registry of the run's OCI source, with the same credentials and
// CA as the source, never from the run's environment: a CLI configuration
// whose oci_default_credentials names only the stage's docker config (on
// top of the configuration the operator set in TF_CLI_CONFIG_FILE, if
// any), and an SSL_CERT_FILE of the system's CAs and the source's. The
// files are written once, in the stage's private directory. terraform has
// no OCI modules, and gets nothing.
func (r *runner) ociModuleEnv(env map[string]string) error {
	a := r.spec.Registry
	if a == nil || r.engine != "tofu" {
		return nil
	}
	if r.ociEnv == nil {
		r.ociEnv = map[string]string{}
		if a.CredentialsFile != "" {
			var cfg bytes.Buffer
			if op := env["TF_CLI_CONFIG_FILE"]; op != "" {
				// A file that does not exist configures nothing, as for
				// the engine itself.
				b, err := os.ReadFile(op)
				if err != nil && !errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("reading the CLI configuration TF_CLI_CONFIG_FILE names: %w", err)
				}
				cfg.Write(b)
				cfg.WriteString("\n")
			}
			fmt.Fprintf(&cfg, "oci_default_credentials {\n  docker_style_config_files = [%s]\n}\n", strconv.Quote(a.CredentialsFile))
			p := filepath.Join(r.privateDir, "tofu-oci.tofurc")
			if err := os.WriteFile(p, cfg.Bytes(), 0o600); err != nil {
				return fmt.Errorf("writing the CLI configuration for OCI modules: %w", err)
			}
			r.ociEnv["TF_CLI_CONFIG_FILE"] = p
		}
		if a.CAFile != "" {
			var bundle bytes.Buffer
			for _, p := range append([]string{env["SSL_CERT_FILE"]}, systemCABundles...) {
				if b, err := os.ReadFile(p); p != "" && err == nil {
					bundle.Write(b)
					bundle.WriteString("\n")
					break
				}
			}
			ca, err := os.ReadFile(a.CAFile)
			if err != nil {
				return fmt.Errorf("reading the OCI registry's CA certificates: %w", err)
			}
			bundle.Write(ca)
			p := filepath.Join(r.privateDir, "tofu-oci-ca.pem")
			if err := os.WriteFile(p, bundle.Bytes(), 0o600); err != nil {
				return fmt.Errorf("writing the CA bundle for OCI modules: %w", err)
			}
			r.ociEnv["SSL_CERT_FILE"] = p
		}
	}
	for k, v := range r.ociEnv {
		env[k] = v
	}
	return nil
}
