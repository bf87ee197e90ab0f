package plugin

import (
	"net"
	"strconv"
	"testing"
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
