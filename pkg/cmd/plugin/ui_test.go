package plugin

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestUIPortInUse: a port that another program holds is refused with the
// flag that chooses another, before anything is served.
func TestUIPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	f := newFakeServer(t, nil)
	f.run(t, "", "ui", "--port", port).expect(t, ExitFailed, "",
		"port "+port+" on 127.0.0.1 is in use: choose another with --port, or leave --port out for a free one")
}

// TestUIRunName: ui RUN links to the run's page; a RUN that cannot be a
// run's name is refused before anything is served.
func TestUIRunName(t *testing.T) {
	f := newFakeServer(t, nil)
	f.run(t, "", "ui", "Not_A_Run").expect(t, ExitFailed, "", `error: "Not_A_Run" is not a run's name: a lowercase RFC 1123 subdomain`)
}

// TestOpenBrowserHidesTheToken: the desktop's opener gets a file that only
// the user may read, not the link, whose token any user of the machine
// could read on a command line.
func TestOpenBrowserHidesTheToken(t *testing.T) {
	dir := t.TempDir()
	got := filepath.Join(dir, "got")
	// The opener stand-in records the mode and content of the file it was
	// given, and its command line.
	opener := filepath.Join(dir, "opener")
	script := "#!/bin/sh\nstat -c %a \"$1\" >" + got + ".mode\ncat \"$1\" >" + got + ".html\necho \"$@\" >" + got + ".args\n"
	if err := os.WriteFile(opener, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	defer func(saved func(string) *exec.Cmd) { openCommand = saved }(openCommand)
	openCommand = func(file string) *exec.Cmd { return exec.Command(opener, file) }
	link := "http://127.0.0.1:8123/?token=secret-token"
	if err := openBrowser(link); err != nil {
		t.Fatal(err)
	}
	var args []byte
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if b, err := os.ReadFile(got + ".args"); err == nil && len(b) > 0 {
			args = b
			break
		}
	}
	if len(args) == 0 {
		t.Fatal("the opener did not run")
	}
	if strings.Contains(string(args), "secret-token") {
		t.Errorf("the opener's command line holds the token: %s", args)
	}
	mode, _ := os.ReadFile(got + ".mode")
	page, _ := os.ReadFile(got + ".html")
	if strings.TrimSpace(string(mode)) != "600" {
		t.Errorf("the file the opener got has mode %s, want 600", mode)
	}
	if !strings.Contains(string(page), `url=http://127.0.0.1:8123/?token=secret-token"`) {
		t.Errorf("the file does not send the browser on to the link:\n%s", page)
	}
}
