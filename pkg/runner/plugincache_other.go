//go:build !linux

package runner

import (
	"context"
	"errors"
)

// pluginCacheLocking says whether this platform can lock the plugin cache;
// without the lock the cache is not used.
const pluginCacheLocking = false

func lockPluginCache(context.Context, string) (func(), error) {
	return nil, errors.New("the plugin cache cannot be locked on this platform")
}
