package plugin

import (
	"context"
	"errors"
	"fmt"
	"html"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/terrarun/terrarun/pkg/cmd/plugin/webview"
)

func (o *options) uiCommand() *cobra.Command {
	var port int
	var open bool
	cmd := &cobra.Command{
		Use:   "ui [RUN] [--port N] [--open]",
		Short: "Serve the web view (runs, plan diffs, live logs, approvals, workspaces) on 127.0.0.1, acting with your kubeconfig's credentials",
		Long: `Serve the web view on 127.0.0.1 until interrupted, and print its link:
to the runs, or, given RUN, to that run's page.

The link holds a one-time token: opening it logs the browser in (a session
cookie) and spends it; run the command again for a new link. The web view
acts with this kubeconfig's credentials, as kubectl does: it shows an action
only when RBAC allows it, and the server decides every request. It answers
only loopback requests from its own page, and forwards only reads of
terrarun.dev and Events, the run and workspace actions, and self-subject
reviews.

A fixed --port makes the links of TerraformNotifications work: the server's
--web-view-url (the chart's webViewURL) set to http://127.0.0.1:PORT.`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: o.completeRuns,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := o.flags.ToRESTConfig()
			if err != nil {
				return err
			}
			loader := o.flags.ToRawKubeConfigLoader()
			ns, _, err := loader.Namespace()
			if err != nil {
				return err
			}
			context := ""
			if raw, err := loader.RawConfig(); err == nil {
				context = raw.CurrentContext
				if o.flags.Context != nil && *o.flags.Context != "" {
					context = *o.flags.Context
				}
			}
			page := "/"
			if len(args) == 1 {
				if errs := validation.IsDNS1123Subdomain(args[0]); len(errs) > 0 {
					return fmt.Errorf("%q is not a run's name: %s", args[0], strings.Join(errs, "; "))
				}
				page = "/namespaces/" + ns + "/terraformruns/" + args[0]
			}
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			if errors.Is(err, syscall.EADDRINUSE) {
				return fmt.Errorf("port %d on 127.0.0.1 is in use: choose another with --port, or leave --port out for a free one", port)
			} else if err != nil {
				return err
			}
			defer ln.Close()
			srv, err := webview.New(webview.Config{REST: cfg, Port: ln.Addr().(*net.TCPAddr).Port, Namespace: ns, Context: context})
			if err != nil {
				return err
			}
			fmt.Fprintf(o.streams.Out, "Web view of %s at\n\n    %s\n\nThe link works once (it logs a browser in): keep it to yourself. Ctrl-C stops the server.\n", orDash(context), srv.LoginURL(page))
			if open {
				if err := openBrowser(srv.LoginURL(page)); err != nil {
					fmt.Fprintf(o.streams.ErrOut, "Could not open a browser (%v): open the link yourself.\n", err)
				}
			}
			return serve(cmd.Context(), ln, srv)
		},
	}
	cmd.Flags().IntVar(&port, "port", 0, "The port on 127.0.0.1 to serve on; 0, the default, takes a free one.")
	cmd.Flags().BoolVar(&open, "open", false, "Open the link in the desktop's browser.")
	return cmd
}

// serve serves h on ln until ctx ends or an interrupt, then lets the
// requests in flight end (watches and followed logs are cut after a while).
func serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	ctx, cancel := signalContextFrom(ctx)
	defer cancel()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shutdown, stop := context.WithTimeout(context.Background(), 2*time.Second)
	defer stop()
	_ = srv.Shutdown(shutdown)
	return nil
}

// openBrowser opens the login link with the desktop's opener. The link
// holds the one-time token, and a command line is readable by every user of
// the machine: the opener gets a file that only this user may read, which
// sends the browser on to the link, as Jupyter does. The file is removed
// once the browser had time to read it.
func openBrowser(link string) error {
	f, err := os.CreateTemp("", "terrarun-ui-*.html")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "<!doctype html><html><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"0;url=%s\"><title>terrarun web view</title></head>"+
		"<body><p><a href=\"%s\">Open the terrarun web view</a></p></body></html>\n", html.EscapeString(link), html.EscapeString(link))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return err
	}
	time.AfterFunc(time.Minute, func() { os.Remove(f.Name()) })
	return openCommand(f.Name()).Start()
}

// openCommand is the desktop's opener of file; tests replace it.
var openCommand = func(file string) *exec.Cmd {
	switch runtime.GOOS {
	case "darwin":
		return exec.Command("open", file)
	case "windows":
		return exec.Command("rundll32", "url.dll,FileProtocolHandler", file)
	}
	return exec.Command("xdg-open", file)
}
