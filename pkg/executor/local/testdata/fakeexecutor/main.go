// Command fakeexecutor stands in for terrarun-executor in the local
// executor's tests, sandbox init included. It reads --stage-file, reports what it saw (arguments,
// environment, working directory, the spec, and the mode and content of every
// file the spec names) to $FAKE_REPORT_DIR/<process name>.json, appends to
// $FAKE_REPORT_DIR/starts, and behaves as the stage's variables say:
//
//	fake_sleep           how long to run (a Go duration)
//	fake_exit            the exit code
//	fake_output          a line printed to stderr before exiting
//	fake_ignore_sigterm  "true": keep running after SIGTERM
//	fake_print_secrets   "true": print the secret variable files to stderr
//
// Every SIGTERM or SIGINT is appended to $FAKE_REPORT_DIR/<process name>.signals.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/terrarun/terrarun/pkg/sandbox"
	"github.com/terrarun/terrarun/pkg/stage"
)

type fileInfo struct {
	Mode    string `json:"mode"`
	Content string `json:"content"`
}

type report struct {
	Args      []string   `json:"args"`
	Env       []string   `json:"env"`
	Cwd       string     `json:"cwd"`
	StageJSON string     `json:"stageJSON"`
	Spec      stage.Spec `json:"spec"`
	// Token is what descriptor Spec.TokenFD held.
	Token string `json:"token"`
	// TokenFile is what the stage could read of the token file in its
	// work directory: nothing, when it is hidden.
	TokenFile string              `json:"tokenFile"`
	Files     map[string]fileInfo `json:"files"`
	PID       int                 `json:"pid"`
	PGID      int                 `json:"pgid"`
	UID       int                 `json:"uid"`
}

func main() {
	if sandbox.IsShimCall(os.Args[1:]) {
		sandbox.Init(os.Args[1:])
	}
	stageFile := flag.String("stage-file", "", "the stage spec")
	flag.Parse()

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)

	dir := os.Getenv("FAKE_REPORT_DIR")
	raw, err := os.ReadFile(*stageFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "reading stage file:", err)
		os.Exit(2)
	}
	var spec stage.Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		fmt.Fprintln(os.Stderr, "decoding stage file:", err)
		os.Exit(2)
	}
	name := fmt.Sprintf("%s.%s.%s.%d", spec.Namespace, spec.Name, spec.Stage, spec.Attempt)

	vars := map[string]string{}
	for _, v := range spec.Variables {
		vars[v.Name] = v.Value
	}

	r := report{Args: os.Args, Env: os.Environ(), StageJSON: string(raw), Spec: spec,
		Files: map[string]fileInfo{}, PID: os.Getpid()}
	r.Cwd, _ = os.Getwd()
	r.PGID, _ = syscall.Getpgid(0)
	r.UID = os.Getuid()
	record := func(path string) {
		if path == "" {
			return
		}
		fi, err := os.Stat(path)
		if err != nil {
			r.Files[path] = fileInfo{Mode: "missing"}
			return
		}
		c, _ := os.ReadFile(path)
		r.Files[path] = fileInfo{Mode: fmt.Sprintf("%o", fi.Mode().Perm()), Content: string(c)}
	}
	record(*stageFile)
	record(spec.Backend.ConfigFile)
	for _, v := range spec.Variables {
		record(v.File)
	}
	if spec.Source.Dir != "" {
		ents, _ := os.ReadDir(spec.Source.Dir)
		for _, e := range ents {
			record(filepath.Join(spec.Source.Dir, e.Name()))
		}
	}
	if g := spec.Source.Git; g != nil && g.CredentialsDir != "" {
		ents, _ := os.ReadDir(g.CredentialsDir)
		for _, e := range ents {
			record(filepath.Join(g.CredentialsDir, e.Name()))
		}
	}
	if spec.TokenFD > 0 {
		tok, _ := io.ReadAll(os.NewFile(uintptr(spec.TokenFD), "token"))
		r.Token = string(tok)
	}
	tf, _ := os.ReadFile(filepath.Join(r.Cwd, "token"))
	r.TokenFile = string(tf)

	appendLine(filepath.Join(dir, "starts"), name)
	js, _ := json.MarshalIndent(r, "", "  ")
	tmp := filepath.Join(dir, name+".json.tmp")
	if err := os.WriteFile(tmp, js, 0o600); err == nil {
		_ = os.Rename(tmp, filepath.Join(dir, name+".json"))
	}
	if r.Token == "" {
		fmt.Fprintln(os.Stderr, "no token")
		os.Exit(3)
	}

	sleep, _ := time.ParseDuration(vars["fake_sleep"])
	code, _ := strconv.Atoi(vars["fake_exit"])
	fmt.Println("fake executor running", name)
	timer := time.NewTimer(sleep)
	for done := false; !done; {
		select {
		case s := <-sigs:
			appendLine(filepath.Join(dir, name+".signals"), s.String())
			if vars["fake_ignore_sigterm"] != "true" {
				fmt.Fprintln(os.Stderr, "stopping on", s)
				os.Exit(128 + int(s.(syscall.Signal)))
			}
		case <-timer.C:
			done = true
		}
	}
	if vars["fake_print_secrets"] == "true" {
		for _, v := range spec.Variables {
			if v.Secret {
				c, _ := os.ReadFile(v.File)
				fmt.Fprintf(os.Stderr, "secret %s is %s\n", v.Name, c)
			}
		}
	}
	if out := vars["fake_output"]; out != "" {
		fmt.Fprintln(os.Stderr, out)
	}
	os.Exit(code)
}

func appendLine(path, line string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintln(f, line)
}
