package nodeagent

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"
)

// followPoll is how often a followed log is checked for more output.
const followPoll = 100 * time.Millisecond

// Handler serves the kubelet endpoint's subset: GET /healthz, and GET
// /containerLogs/{namespace}/{pod}/{container} with the query parameters
// follow, tailLines and limitBytes (timestamps and previous are ignored).
// When Options.ClientCAFile is set, containerLogs requires a verified client
// certificate.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok")
	})
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", a.containerLogs)
	return mux
}

func (a *Agent) containerLogs(w http.ResponseWriter, req *http.Request) {
	if a.o.ClientCAFile != "" && (req.TLS == nil || len(req.TLS.VerifiedChains) == 0) {
		http.Error(w, "Unauthorized: a client certificate is required", http.StatusUnauthorized)
		return
	}
	ns, podName, name := req.PathValue("namespace"), req.PathValue("pod"), req.PathValue("container")
	q := req.URL.Query()
	follow, _ := strconv.ParseBool(q.Get("follow"))
	tail, limit := int64(-1), int64(-1)
	for param, dst := range map[string]*int64{"tailLines": &tail, "limitBytes": &limit} {
		if s := q.Get(param); s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n < 0 {
				http.Error(w, fmt.Sprintf("invalid %s %q", param, s), http.StatusBadRequest)
				return
			}
			*dst = n
		}
	}
	r := a.runner(ns, podName)
	if r == nil {
		http.Error(w, fmt.Sprintf("pod %s/%s not found on node %s", ns, podName, a.o.NodeName), http.StatusNotFound)
		return
	}
	c := r.container(name)
	if c == nil {
		http.Error(w, fmt.Sprintf("container %q not found in pod %s/%s", name, ns, podName), http.StatusNotFound)
		return
	}
	f, err := os.Open(c.logPath)
	if errors.Is(err, os.ErrNotExist) {
		http.Error(w, fmt.Sprintf("container %q in pod %q is waiting to start: ContainerCreating", name, podName), http.StatusBadRequest)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer f.Close()
	if tail >= 0 {
		if _, err := f.Seek(tailOffset(f, tail), io.SeekStart); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	var out io.Writer = w
	if limit >= 0 {
		out = &limitWriter{w: w, n: limit}
	}
	flusher, _ := w.(http.Flusher)
	copyAll := func() bool {
		_, err := io.Copy(out, f)
		if flusher != nil {
			flusher.Flush()
		}
		return err == nil
	}
	if !copyAll() || !follow {
		return
	}
	t := time.NewTicker(followPoll)
	defer t.Stop()
	for {
		select {
		case <-req.Context().Done():
			return
		case <-c.exited:
			copyAll()
			return
		case <-t.C:
			if !copyAll() {
				return
			}
		}
	}
}

// tailOffset is where the last n lines of f begin.
func tailOffset(f *os.File, n int64) int64 {
	st, err := f.Stat()
	if err != nil || n == 0 {
		if err == nil {
			return st.Size()
		}
		return 0
	}
	size := st.Size()
	const chunk = 32 * 1024
	buf := make([]byte, chunk)
	end := size
	// A final newline ends the last line; it does not start another.
	lines := int64(0)
	skipFinal := true
	for end > 0 {
		start := max(end-chunk, 0)
		b := buf[:end-start]
		if _, err := f.ReadAt(b, start); err != nil && err != io.EOF {
			return 0
		}
		for i := len(b) - 1; i >= 0; i-- {
			if b[i] != '\n' {
				skipFinal = false
				continue
			}
			if skipFinal {
				skipFinal = false
				continue
			}
			lines++
			if lines == n {
				return start + int64(i) + 1
			}
		}
		end = start
	}
	return 0
}

// limitWriter writes at most n bytes, then fails.
type limitWriter struct {
	w io.Writer
	n int64
}

var errLimit = errors.New("limitBytes reached")

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errLimit
	}
	short := false
	if int64(len(p)) > l.n {
		p, short = p[:l.n], true
	}
	n, err := l.w.Write(p)
	l.n -= int64(n)
	if err == nil && short {
		err = errLimit
	}
	return n, err
}

// selfSignedCert makes a serving certificate for address and name, valid for
// a year.
func selfSignedCert(name, address string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{name},
		IPAddresses:  []net.IP{net.ParseIP(address)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
