package runtask

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha512"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// Payload is what a run task receives: the fields of HCP Terraform's run
// task request (payload version 1), filled from the run. Fields HCP
// Terraform sends that terrarun has no counterpart for are empty.
type Payload struct {
	PayloadVersion             int    `json:"payload_version"`
	AccessToken                string `json:"access_token"`
	Stage                      string `json:"stage"`
	IsSpeculative              bool   `json:"is_speculative"`
	TaskResultID               string `json:"task_result_id"`
	TaskResultEnforcementLevel string `json:"task_result_enforcement_level"`
	TaskResultCallbackURL      string `json:"task_result_callback_url"`
	RunAppURL                  string `json:"run_app_url"`
	RunID                      string `json:"run_id"`
	RunMessage                 string `json:"run_message"`
	RunCreatedAt               string `json:"run_created_at"`
	RunCreatedBy               string `json:"run_created_by"`
	WorkspaceID                string `json:"workspace_id"`
	WorkspaceName              string `json:"workspace_name"`
	WorkspaceAppURL            string `json:"workspace_app_url"`
	OrganizationName           string `json:"organization_name"`
	PlanJSONAPIURL             string `json:"plan_json_api_url,omitempty"`
	VCSRepoURL                 string `json:"vcs_repo_url,omitempty"`
	VCSBranch                  string `json:"vcs_branch,omitempty"`
	VCSCommitURL               string `json:"vcs_commit_url,omitempty"`
	ConfigurationVersionID     string `json:"configuration_version_id,omitempty"`
}

// hcpStages are the stage names of the payload.
var hcpStages = map[v1alpha1.RunTaskStage]string{
	v1alpha1.RunTaskPrePlan:   "pre_plan",
	v1alpha1.RunTaskPostPlan:  "post_plan",
	v1alpha1.RunTaskPreApply:  "pre_apply",
	v1alpha1.RunTaskPostApply: "post_apply",
}

// NewPayload returns the payload of a call of task at stage of run, with
// the call's access token; server is the base URL at which the task reaches
// terrarun.
func NewPayload(run *v1alpha1.TerraformRun, call *v1alpha1.RunTaskCall, token, server string) Payload {
	runURL := fmt.Sprintf("%s/apis/%s/namespaces/%s/terraformruns/%s", server, v1alpha1.SchemeGroupVersion, run.Namespace, run.Name)
	p := Payload{
		PayloadVersion:             1,
		AccessToken:                token,
		Stage:                      hcpStages[call.Stage],
		IsSpeculative:              run.Spec.Operation == v1alpha1.OperationPlan,
		TaskResultID:               call.Task + "." + string(call.Stage),
		TaskResultEnforcementLevel: "mandatory",
		TaskResultCallbackURL:      runURL + "/taskresult",
		RunAppURL:                  runURL,
		RunID:                      string(run.UID),
		RunMessage:                 runMessage(run),
		RunCreatedAt:               run.CreationTimestamp.UTC().Format(time.RFC3339),
		WorkspaceName:              run.Spec.Workspace,
		OrganizationName:           run.Namespace,
	}
	if call.Enforcement == v1alpha1.RunTaskAdvisory {
		p.TaskResultEnforcementLevel = "advisory"
	}
	if run.Spec.Creator != nil {
		p.RunCreatedBy = run.Spec.Creator.Username
	}
	if ws := run.Labels[v1alpha1.LabelWorkspace]; ws != "" {
		p.WorkspaceName = ws
		p.WorkspaceAppURL = fmt.Sprintf("%s/apis/%s/namespaces/%s/terraformworkspaces/%s", server, v1alpha1.SchemeGroupVersion, run.Namespace, ws)
	}
	if call.Stage != v1alpha1.RunTaskPrePlan {
		p.PlanJSONAPIURL = runURL + "/plan?format=json"
	}
	if g := run.Spec.Source.Git; g != nil {
		p.VCSRepoURL = g.URL
		p.VCSBranch = g.Ref
	}
	if s := run.Status.Source; s != nil {
		p.ConfigurationVersionID = s.Revision
	}
	return p
}

// runMessage says why the run was made: its workspace's trigger, or that a
// user created it.
func runMessage(run *v1alpha1.TerraformRun) string {
	if t := run.Annotations[v1alpha1.AnnotationTrigger]; t != "" {
		return fmt.Sprintf("Triggered by workspace %s: %s", run.Labels[v1alpha1.LabelWorkspace], t)
	}
	return "Created directly"
}

// signatureHeader is the header that carries a payload's signature.
const signatureHeader = "X-TFC-Task-Signature"

// sign returns the signature of body with key: the hex HMAC-SHA512, as HCP
// Terraform signs its run task payloads.
func sign(key, body []byte) string {
	mac := hmac.New(sha512.New, key)
	mac.Write(body)
	return hex.EncodeToString(mac.Sum(nil))
}

// Send POSTs p to url, which must be https, verifying the server against
// caBundle (PEM; the system's roots when empty), signed with key when key
// is not empty. The task must answer 200 OK; it answers the call itself
// later, through the callback. A redirect is not followed (the payload
// carries the call's token, for url only), and what a refusal's body says
// is not kept: the run's readers see the error, and a task URL that points
// at an internal service must not read its pages back to them.
func Send(ctx context.Context, url string, caBundle, key []byte, p Payload) error {
	client, err := taskClient(url, caBundle)
	if err != nil {
		return err
	}
	body, err := json.Marshal(p)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "terrarun")
	if len(key) > 0 {
		req.Header.Set(signatureHeader, sign(key, body))
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("it answered %s (a task accepts a payload with 200 OK)", resp.Status)
	}
	return nil
}

// taskClient is the client that sends a payload to url: https only, to a
// server that caBundle (or the system) trusts, following no redirect.
func taskClient(url string, caBundle []byte) (*http.Client, error) {
	if !strings.HasPrefix(url, "https://") {
		return nil, fmt.Errorf("%s is not an https URL: the payload carries a token that reads the run's plan, and goes only to a server that proves who it is", url)
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(caBundle) > 0 {
		tlsConfig.RootCAs = x509.NewCertPool()
		if !tlsConfig.RootCAs.AppendCertsFromPEM(caBundle) {
			return nil, errors.New("spec.caBundle holds no PEM certificate")
		}
	}
	return &http.Client{
		Transport:     &http.Transport{TLSClientConfig: tlsConfig, DisableKeepAlives: true, Proxy: http.ProxyFromEnvironment, TLSHandshakeTimeout: 10 * time.Second},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, nil
}
