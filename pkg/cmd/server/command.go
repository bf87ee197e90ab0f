package server

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
	genericapiserver "k8s.io/apiserver/pkg/server"

	"github.com/terrarun/terrarun/pkg/standalone"
)

// NewCommand returns the terrarun-apiserver command with its kubeconfig subcommand.
func NewCommand(out io.Writer) *cobra.Command {
	o := NewOptions(out)
	cmd := &cobra.Command{
		Use:   "terrarun-apiserver",
		Short: "Serve TerraformRun objects as a Kubernetes API",
		Long: `terrarun-apiserver serves the terrarun.dev API group.

Behind a Kubernetes cluster it is an aggregated API server registered through an
APIService, with its own etcd (--etcd-servers) and authentication and
authorization delegated to the cluster.

With --standalone it needs no cluster: it starts embedded etcd in --data-dir,
issues itself certificates, and writes an admin kubeconfig there.`,
		SilenceUsage: true,
		Version:      versionLine(),
		RunE: func(c *cobra.Command, _ []string) error {
			if err := o.Complete(c.Flags()); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			// SIGTERM and SIGINT start a graceful shutdown; a second signal exits at once.
			return o.Run(genericapiserver.SetupSignalContext())
		},
	}
	cmd.SetVersionTemplate("{{.Version}}\n")
	o.AddFlags(cmd.Flags())
	cmd.AddCommand(newKubeconfigCommand(out))
	return cmd
}

func newKubeconfigCommand(out io.Writer) *cobra.Command {
	var (
		dataDir, user, output string
		groups                []string
	)
	cmd := &cobra.Command{
		Use:   "kubeconfig --user NAME [--group GROUP ...] --output FILE",
		Short: "Write a kubeconfig for another user of a standalone server",
		Long: `Writes a kubeconfig whose client certificate, signed by the standalone
server's CA in --data-dir, authenticates as --user with the given groups.
Use it to try a second person, for example an approver who is not the creator.
The groups terrarun:viewers, terrarun:editors and terrarun:approvers grant
terrarun's roles; a user without them may read only discovery.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(*cobra.Command, []string) error {
			if user == "" {
				return fmt.Errorf("--user is required")
			}
			if output == "" {
				return fmt.Errorf("--output is required")
			}
			if err := standalone.MintKubeconfig(dataDir, output, user, groups); err != nil {
				return err
			}
			fmt.Fprintf(out, "wrote %s for user %q\n", output, user)
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", defaultDataDir, "The standalone server's --data-dir.")
	cmd.Flags().StringVar(&user, "user", "", "User name to authenticate as.")
	cmd.Flags().StringSliceVar(&groups, "group", nil, "Group of the user; repeat for several. terrarun:viewers, terrarun:editors and terrarun:approvers grant terrarun's roles.")
	cmd.Flags().StringVarP(&output, "output", "o", "", "Path of the kubeconfig to write.")
	return cmd
}
