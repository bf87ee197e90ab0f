package notification

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/slack-go/slack"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// Kind is the kind of a destination.
type Kind string

// The kinds of destination.
const (
	KindWebhook     Kind = "webhook"
	KindSlack       Kind = "slack"
	KindCloudEvents Kind = "cloudEvents"
)

// Destination is where a notification's events go, with the Secret values
// it names read already.
type Destination struct {
	Kind Kind
	// URL is the receiver's URL (for Slack, read from its Secret: it is a
	// credential, and no message names it).
	URL string
	// Key signs each delivery when not empty.
	Key []byte
	// CABundle verifies an https receiver; the system's roots when empty.
	CABundle []byte
}

// Error is a delivery that failed: Retry says whether trying again later
// may succeed. Its message never holds the receiver's URL, which can be a
// credential, nor what the receiver answered beyond its status.
type Error struct {
	Retry   bool
	Message string
}

func (e *Error) Error() string { return e.Message }

// sendTimeout bounds one delivery.
const sendTimeout = 15 * time.Second

// Send delivers p to d, at now (the signature's timestamp). It returns nil
// when the receiver accepted it (a 2xx answer), an *Error otherwise.
func Send(ctx context.Context, d Destination, p Payload, now time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	client, err := httpClient(d.CABundle)
	if err != nil {
		return &Error{Message: err.Error()}
	}
	body, err := json.Marshal(p)
	if err != nil {
		return &Error{Message: err.Error()}
	}
	headers := http.Header{}
	if len(d.Key) > 0 {
		wh, err := standardwebhooks.NewWebhookRaw(d.Key)
		if err != nil {
			return &Error{Message: "the HMAC key: " + err.Error()}
		}
		// Signed as Standard Webhooks sign: the ID, the timestamp and
		// the body; a receiver refuses a replay outside its tolerance.
		sig, err := wh.Sign(p.ID, now, body)
		if err != nil {
			return &Error{Message: err.Error()}
		}
		headers.Set(standardwebhooks.HeaderWebhookID, p.ID)
		headers.Set(standardwebhooks.HeaderWebhookTimestamp, fmt.Sprint(now.Unix()))
		headers.Set(standardwebhooks.HeaderWebhookSignature, sig)
	}
	switch d.Kind {
	case KindWebhook:
		return postJSON(ctx, client, d.URL, headers, body)
	case KindSlack:
		err := slack.PostWebhookCustomHTTPContext(ctx, d.URL, client, &slack.WebhookMessage{Text: SlackText(p)})
		var code slack.StatusCodeError
		if errors.As(err, &code) {
			return answered(code.Code, code.Status)
		}
		return transportError(err)
	case KindCloudEvents:
		return sendCloudEvent(ctx, client, d.URL, headers, p, body)
	}
	return &Error{Message: fmt.Sprintf("no destination of kind %q", d.Kind)}
}

// postJSON POSTs body, a JSON document, to target.
func postJSON(ctx context.Context, client *http.Client, target string, headers http.Header, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return &Error{Message: "the receiver's URL does not parse"}
	}
	req.Header = headers
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "terrarun")
	resp, err := client.Do(req)
	if err != nil {
		return transportError(err)
	}
	resp.Body.Close()
	return answered(resp.StatusCode, resp.Status)
}

// sendCloudEvent sends p as a CloudEvent in binary content mode: the
// payload is its data, its attributes the headers.
func sendCloudEvent(ctx context.Context, client *http.Client, target string, headers http.Header, p Payload, body []byte) error {
	protocol, err := cehttp.New(cehttp.WithTarget(target), cehttp.WithClient(*client), cehttp.WithHeader("User-Agent", "terrarun"))
	if err != nil {
		return &Error{Message: "the receiver's URL does not parse"}
	}
	ce, err := cloudevents.NewClient(protocol)
	if err != nil {
		return &Error{Message: err.Error()}
	}
	event := cloudevents.NewEvent()
	event.SetID(p.ID)
	event.SetType(eventType(p))
	event.SetSource(eventSource(p))
	if p.Run != nil {
		event.SetSubject(p.Run.Name)
	} else if p.Workspace != nil {
		event.SetSubject(p.Workspace.Name)
	}
	t, _ := time.Parse(time.RFC3339, p.Time)
	event.SetTime(t)
	if err := event.SetData(cloudevents.ApplicationJSON, json.RawMessage(body)); err != nil {
		return &Error{Message: err.Error()}
	}
	result := ce.Send(cehttp.WithCustomHeader(ctx, headers), event)
	if cloudevents.IsACK(result) {
		return nil
	}
	var r *cehttp.Result
	if cloudevents.ResultAs(result, &r) && r.StatusCode > 0 {
		return answered(r.StatusCode, fmt.Sprintf("%d %s", r.StatusCode, http.StatusText(r.StatusCode)))
	}
	return transportError(result)
}

// eventType is a CloudEvent's type: dev.terrarun.run.TRIGGER, or
// dev.terrarun.workspace.Drifted.
func eventType(p Payload) string {
	if p.Run == nil {
		return "dev.terrarun.workspace." + string(p.Trigger)
	}
	return "dev.terrarun.run." + string(p.Trigger)
}

// eventSource is a CloudEvent's source: the API path of its run or
// workspace.
func eventSource(p Payload) string {
	if p.Run != nil {
		return p.Run.Path
	}
	return p.Workspace.Path
}

// answered is the outcome of a receiver's answer with status code: nil for
// 2xx; retried for 408, 429 and 5xx; final for the rest (a redirect is
// not followed).
func answered(code int, status string) error {
	switch {
	case code >= 200 && code < 300:
		return nil
	case code >= 300 && code < 400:
		return &Error{Message: fmt.Sprintf("the receiver answered %s; a redirect is not followed: set the URL it redirects to", status)}
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
		return &Error{Retry: true, Message: "the receiver answered " + status}
	}
	return &Error{Message: "the receiver answered " + status + "; a refusal is not retried: check the URL and the receiver's key"}
}

// transportError is a delivery that reached no answer: retried, its
// message without the URL.
func transportError(err error) error {
	if err == nil {
		return nil
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return &Error{Retry: true, Message: fmt.Sprintf("the receiver did not answer within %s", sendTimeout)}
	}
	return &Error{Retry: true, Message: "the receiver was not reached: " + err.Error()}
}

// httpClient is the client of a delivery: it verifies an https receiver
// against caBundle (or the system's roots), and follows no redirect.
func httpClient(caBundle []byte) (*http.Client, error) {
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(caBundle) > 0 {
		tlsConfig.RootCAs = x509.NewCertPool()
		if !tlsConfig.RootCAs.AppendCertsFromPEM(caBundle) {
			return nil, errors.New("caBundle holds no PEM certificate")
		}
	}
	return &http.Client{
		Transport:     &http.Transport{TLSClientConfig: tlsConfig, DisableKeepAlives: true, Proxy: http.ProxyFromEnvironment, TLSHandshakeTimeout: 10 * time.Second},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, nil
}
