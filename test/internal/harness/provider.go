package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"golang.org/x/mod/sumdb/dirhash"
)

// TestProviderRequirement is the required_providers block that a
// configuration using the test provider (test/provider) declares: with the
// registry's host, which tofu would otherwise take to be its own.
const TestProviderRequirement = `terraform {
  required_providers {
    testing = {
      source  = "registry.terraform.io/terrarun/testing"
      version = "0.1.0"
    }
  }
}
`

// TestProvider is the test provider installed in a filesystem mirror: no
// registry is reachable, so terraform and tofu install it from there.
type TestProvider struct {
	// Dir holds the mirror and CLIConfig: stages must see it.
	Dir string
	// CLIConfig is a CLI configuration file (for TF_CLI_CONFIG_FILE) that
	// installs terrarun/testing from the mirror, and nothing else from
	// anywhere.
	CLIConfig string
}

// Env is the environment that makes the engine use the mirror.
func (p TestProvider) Env() []string { return []string{"TF_CLI_CONFIG_FILE=" + p.CLIConfig} }

// InstallTestProvider builds test/provider into a filesystem mirror under
// dir (unpacked layout), and writes the CLI configuration beside it.
func InstallTestProvider(dir string) (TestProvider, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return TestProvider{}, err
	}
	mirror := filepath.Join(dir, "mirror")
	platform := runtime.GOOS + "_" + runtime.GOARCH
	bin := filepath.Join(mirror, "registry.terraform.io", "terrarun", "testing", "0.1.0", platform, "terraform-provider-testing_v0.1.0")
	build := exec.Command("go", "build", "-o", bin, "./test/provider")
	build.Dir = RepoPath()
	if out, err := build.CombinedOutput(); err != nil {
		return TestProvider{}, fmt.Errorf("building the test provider: %w\n%s", err, out)
	}
	p := TestProvider{Dir: dir, CLIConfig: filepath.Join(dir, "terraformrc")}
	config := fmt.Sprintf(`provider_installation {
  filesystem_mirror {
    path    = %q
    include = ["registry.terraform.io/terrarun/testing"]
  }
}
`, mirror)
	if err := os.WriteFile(p.CLIConfig, []byte(config), 0o644); err != nil {
		return TestProvider{}, err
	}
	return p, nil
}

// LockFile is a dependency lock file (.terraform.lock.hcl) that records the
// test provider with the checksum of the package in the mirror (its "h1:"
// hash, as terraform and tofu compute it for an unpacked package), so that
// init may take it from a plugin cache.
func (p TestProvider) LockFile() (string, error) {
	pkg := filepath.Join(p.Dir, "mirror", "registry.terraform.io", "terrarun", "testing", "0.1.0", runtime.GOOS+"_"+runtime.GOARCH)
	h1, err := dirhash.HashDir(pkg, "", dirhash.Hash1)
	if err != nil {
		return "", fmt.Errorf("hashing the test provider: %w", err)
	}
	return fmt.Sprintf(`provider "registry.terraform.io/terrarun/testing" {
  version     = "0.1.0"
  constraints = "0.1.0"
  hashes = [
    %q,
  ]
}
`, h1), nil
}

// Engines returns Engine(), then the other kind of engine when this host
// has one: terraform on PATH, or tofu ($TERRARUN_TOFU, on PATH, or built by
// `hack/engine.sh --build` into .cache/engine), so that tests can run both.
func Engines() ([]string, error) {
	first, err := Engine()
	if err != nil {
		return nil, err
	}
	engines := []string{first}
	var other []string
	if filepath.Base(first) == "tofu" {
		other = []string{"terraform"}
	} else {
		other = []string{os.Getenv("TERRARUN_TOFU"), "tofu", filepath.Join(RepoPath(), ".cache", "engine", "tofu")}
	}
	for _, o := range other {
		if o == "" {
			continue
		}
		if p, err := exec.LookPath(o); err == nil {
			if abs, err := filepath.Abs(p); err == nil && abs != first {
				return append(engines, abs), nil
			}
		}
	}
	return engines, nil
}
