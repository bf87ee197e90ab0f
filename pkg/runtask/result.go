package runtask

import (
	"encoding/json"
	"fmt"
	"net/url"
)

// Result is a task's answer: the attributes of the JSON:API "task-results"
// document HCP Terraform's run tasks PATCH to their callback URL.
type Result struct {
	// Status is passed, failed or running (a progress report).
	Status string
	// Message is what the task says.
	Message string
	// URL links to the task's details.
	URL string
}

// MaxResultBytes bounds an answer's body.
const MaxResultBytes = 64 << 10

// maxMessage bounds the message recorded.
const maxMessage = 1024

// ParseResult parses a task's answer, and says what is wrong with one it
// refuses, naming the field.
func ParseResult(body []byte) (Result, error) {
	var doc struct {
		Data struct {
			Type       string `json:"type"`
			Attributes struct {
				Status  string `json:"status"`
				Message string `json:"message"`
				URL     string `json:"url"`
			} `json:"attributes"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return Result{}, fmt.Errorf("the body is not a JSON:API task-results document: %v", err)
	}
	if doc.Data.Type != "task-results" {
		return Result{}, fmt.Errorf(`data.type must be "task-results", not %q`, doc.Data.Type)
	}
	a := doc.Data.Attributes
	switch a.Status {
	case "passed", "failed", "running":
	default:
		return Result{}, fmt.Errorf(`data.attributes.status must be "passed", "failed" or "running", not %q`, a.Status)
	}
	if a.URL != "" {
		u, err := url.Parse(a.URL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return Result{}, fmt.Errorf("data.attributes.url must be an http or https URL, not %q", a.URL)
		}
	}
	if len(a.Message) > maxMessage {
		a.Message = a.Message[:maxMessage] + "…"
	}
	return Result{Status: a.Status, Message: a.Message, URL: a.URL}, nil
}
