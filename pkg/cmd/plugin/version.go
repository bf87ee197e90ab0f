package plugin

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned"
)

// buildVersion is the plugin's version, set by the Makefile from `git
// describe` with -ldflags "-X …/pkg/cmd/plugin.buildVersion=…"; "dev" for a
// plain go build.
var buildVersion = "dev"

func (o *options) versionCommand() *cobra.Command {
	return o.command("version", "Print the plugin's version and the terrarun server's", cobra.NoArgs, func(ctx context.Context, cs versioned.Interface, _ string, _ []string) error {
		fmt.Fprintf(o.streams.Out, "Plugin Version: %s\n", buildVersion)
		info, err := cs.Discovery().ServerVersion()
		if err != nil {
			return fmt.Errorf("asking the server its version: %w", err)
		}
		fmt.Fprintf(o.streams.Out, "Server Version: %s\n", info.GitVersion)
		return nil
	})
}
