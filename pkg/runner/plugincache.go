package runner

import (
	"github.com/hashicorp/terraform-config-inspect/tfconfig"
)

// usesPluginCache says whether init of the configuration in dir may install
// providers into the plugin cache: it has a cache, and the configuration
// needs a provider that is not built in (or calls modules, whose needs are
// known only once they are installed). Only such inits take the cache's
// lock, so that runs of built-in providers alone never wait for each other.
func (r *runner) usesPluginCache(dir string) bool {
	if r.spec.PluginCacheDir == "" || !pluginCacheLocking {
		return false
	}
	mod, diags := tfconfig.LoadModule(dir)
	if diags.HasErrors() || len(mod.ModuleCalls) > 0 {
		return true
	}
	builtin := func(name string) bool { return name == "terraform" }
	for name := range mod.RequiredProviders {
		if !builtin(name) {
			return true
		}
	}
	for _, resources := range []map[string]*tfconfig.Resource{mod.ManagedResources, mod.DataResources} {
		for _, res := range resources {
			if !builtin(res.Provider.Name) {
				return true
			}
		}
	}
	for name := range mod.ProviderConfigs {
		if !builtin(name) {
			return true
		}
	}
	return false
}

// pluginCacheLockFile is the lock, in the plugin cache, that inits which may
// write to it hold: neither terraform nor tofu makes the cache safe for
// concurrent installs.
const pluginCacheLockFile = ".terrarun.lock"
