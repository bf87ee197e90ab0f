package server

import (
	"fmt"
	"net/http"
	"time"

	apiserverconfig "k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	authenticatorunion "k8s.io/apiserver/pkg/authentication/request/union"
	authorizerunion "k8s.io/apiserver/pkg/authorization/union"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/kubernetes"

	"github.com/terrarun/terrarun/pkg/executor/auth"
	"github.com/terrarun/terrarun/pkg/executor/job"
	"github.com/terrarun/terrarun/pkg/runtask"
)

// stageCredentials are how an executor's stages prove who they are: the
// credential they present (tokens) and the run, stage and attempt it stands
// for (identities).
type stageCredentials struct {
	tokens     authenticator.Request
	identities auth.Resolver
	// first says the credential is checked in memory, before users'; a
	// pod's token is reviewed by kube-apiserver, after them.
	first bool
}

// applyExecutorAuth lets stages authenticate with creds, and run tasks with
// their calls' tokens (checked against runs), and be authorized by
// pkg/executor/auth and pkg/runtask before any user is: executor identities
// and run tasks are never users, and users' authorizers never see them.
func applyExecutorAuth(config *genericapiserver.RecommendedConfig, creds stageCredentials, runs runtask.RunGetter) error {
	executors := auth.NewAuthenticator(creds.tokens, creds.identities)
	var authenticators []authenticator.Request
	if creds.first {
		authenticators = append(authenticators, executors)
	}
	if config.Authentication.Authenticator != nil {
		authenticators = append(authenticators, config.Authentication.Authenticator)
	}
	if !creds.first {
		authenticators = append(authenticators, executors)
	}
	// A task's token is checked in memory, against its run, and never sent
	// on to the cluster's TokenReview.
	config.Authentication.Authenticator = runtask.NewAuthenticator(runs, time.Now, authenticatorunion.New(authenticators...))
	named := []authorizerunion.NamedAuthorizer{
		{AuthorizerName: "terrarun-run-tasks", Authorizer: runtask.NewAuthorizer()},
		{AuthorizerName: "terrarun-executors", Authorizer: auth.NewAuthorizer()},
	}
	if config.Authorization.Authorizer != nil {
		named = append(named, authorizerunion.NamedAuthorizer{AuthorizerName: "users", Authorizer: config.Authorization.Authorizer})
	}
	union, err := authorizerunion.New(named...)
	if err != nil {
		return err
	}
	config.Authorization.Authorizer = union
	return nil
}

// podTokenAuthenticator authenticates executor pods' projected, pod-bound
// service-account tokens for the audience terrarun.dev, through a TokenReview
// by the cluster.
func podTokenAuthenticator(kube kubernetes.Interface) (authenticator.Request, error) {
	tokens, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                &apiserverconfig.AnonymousAuthConfig{Enabled: false},
		TokenAccessReviewClient:  kube.AuthenticationV1(),
		TokenAccessReviewTimeout: 10 * time.Second,
		WebhookRetryBackoff:      genericoptions.DefaultAuthWebhookRetryBackoff(),
		CacheTTL:                 10 * time.Second,
		APIAudiences:             authenticator.Audiences{job.DefaultAudience},
	}.New()
	if err != nil {
		return nil, fmt.Errorf("building the executor token authenticator: %w", err)
	}
	// The executor authenticator reviews tokens for its own audience, not the
	// API audiences of the request, and vouches for them to this server only.
	return authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		ctx := authenticator.WithAudiences(req.Context(), authenticator.Audiences{job.DefaultAudience})
		resp, ok, err := tokens.AuthenticateRequest(req.WithContext(ctx))
		if resp != nil {
			resp.Audiences = nil
		}
		return resp, ok, err
	}), nil
}
