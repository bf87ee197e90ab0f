package nodeagent

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

const (
	testNode = "node-1"
	testNS   = "ns"
	timeout  = 30 * time.Second
)

var podsGVR = corev1.SchemeGroupVersion.WithResource("pods")

// harness is an agent on a fake clientset, with reactors for pods/binding
// (which the fake does not implement) and serviceaccounts/token.
type harness struct {
	t  *testing.T
	cs *fake.Clientset
	a  *Agent

	mu     sync.Mutex
	tokens []tokenCall
	// tokenTTL is the lifetime of issued tokens (default: as requested).
	tokenTTL time.Duration
	issued   int

	stop func() // stops the agent and waits for Run; idempotent
}

type tokenCall struct {
	namespace, serviceAccount string
	req                       authenticationv1.TokenRequest
	token                     string
}

type testLogger struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (l *testLogger) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.done {
		l.t.Logf(format, args...)
	}
}

// newHarness makes an agent; configure may change options before New and the
// agent before Run. The agent runs until the test ends.
func newHarness(t *testing.T, configure func(*Options), objects ...runtime.Object) *harness {
	t.Helper()
	h := &harness{t: t, cs: fake.NewClientset(objects...)}
	h.cs.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := action.(k8stesting.CreateAction).GetObject().(*corev1.Binding)
		obj, err := h.cs.Tracker().Get(podsGVR, b.Namespace, b.Name)
		if err != nil {
			return true, nil, err
		}
		pod := obj.(*corev1.Pod).DeepCopy()
		if pod.Spec.NodeName != "" {
			return true, nil, apierrors.NewConflict(podsGVR.GroupResource(), b.Name, fmt.Errorf("already bound"))
		}
		if b.UID != "" && b.UID != pod.UID {
			return true, nil, apierrors.NewConflict(podsGVR.GroupResource(), b.Name, fmt.Errorf("uid mismatch"))
		}
		pod.Spec.NodeName = b.Target.Name
		return true, b, h.cs.Tracker().Update(podsGVR, pod, b.Namespace)
	})
	h.cs.PrependReactor("create", "serviceaccounts", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "token" {
			return false, nil, nil
		}
		ca := action.(k8stesting.CreateActionImpl)
		req := ca.GetObject().(*authenticationv1.TokenRequest).DeepCopy()
		h.mu.Lock()
		defer h.mu.Unlock()
		h.issued++
		aud := strings.Join(req.Spec.Audiences, ",")
		pod := ""
		if req.Spec.BoundObjectRef != nil {
			pod = req.Spec.BoundObjectRef.Name
		}
		token := fmt.Sprintf("token/%s/%s/%s/%d", ca.Name, aud, pod, h.issued)
		ttl := h.tokenTTL
		if ttl == 0 {
			ttl = time.Duration(ptr.Deref(req.Spec.ExpirationSeconds, 3600)) * time.Second
		}
		h.tokens = append(h.tokens, tokenCall{namespace: ca.Namespace, serviceAccount: ca.Name, req: *req.DeepCopy(), token: token})
		req.Status = authenticationv1.TokenRequestStatus{Token: token, ExpirationTimestamp: metav1.NewTime(time.Now().Add(ttl))}
		return true, req, nil
	})

	log := &testLogger{t: t}
	o := Options{
		NodeName: testNode,
		Address:  "127.0.0.1",
		Client:   h.cs,
		RootDir:  t.TempDir(),
		Logf:     log.logf,
	}
	if configure != nil {
		configure(&o)
	}
	return h.start(o, log)
}

func (h *harness) start(o Options, log *testLogger) *harness {
	t := h.t
	t.Helper()
	a, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.a = a
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- a.Run(ctx) }()
	var once sync.Once
	h.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-runErr:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(timeout):
				t.Errorf("Run did not return")
			}
			log.mu.Lock()
			log.done = true
			log.mu.Unlock()
		})
	}
	t.Cleanup(h.stop)
	select {
	case <-a.Ready():
	case err := <-runErr:
		runErr <- err
		t.Fatalf("Run: %v", err)
	case <-time.After(timeout):
		t.Fatal("the agent did not get ready")
	}
	return h
}

func (h *harness) tokenCalls() []tokenCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]tokenCall(nil), h.tokens...)
}

// pod returns a pod bound to the test node running script with /bin/sh.
func shPod(name, script string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{
			NodeName:      testNode,
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name:    "main",
				Image:   "busybox",
				Command: []string{"/bin/sh", "-c", script},
			}},
		},
	}
}

func (h *harness) create(pod *corev1.Pod) {
	h.t.Helper()
	if _, err := h.cs.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		h.t.Fatalf("creating pod %s: %v", pod.Name, err)
	}
}

func (h *harness) get(name string) (*corev1.Pod, error) {
	return h.cs.CoreV1().Pods(testNS).Get(context.Background(), name, metav1.GetOptions{})
}

// waitPod polls pod name until cond holds.
func (h *harness) waitPod(name, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	h.t.Helper()
	var last *corev1.Pod
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		pod, err := h.get(name)
		if err == nil {
			last = pod
			if cond(pod) {
				return pod
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	h.t.Fatalf("pod %s: timed out waiting until %s; last seen: %+v", name, what, last)
	return nil
}

func (h *harness) waitPhase(name string, phase corev1.PodPhase) *corev1.Pod {
	h.t.Helper()
	return h.waitPod(name, "phase "+string(phase), func(p *corev1.Pod) bool { return p.Status.Phase == phase })
}

func (h *harness) waitGone(name string) {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if _, err := h.get(name); apierrors.IsNotFound(err) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	h.t.Fatalf("pod %s was not deleted", name)
}

// deleteGracefully does what kube-apiserver does on a graceful delete of a
// bound pod: it sets deletionTimestamp and deletionGracePeriodSeconds, and
// waits for the node to delete it with grace 0.
func (h *harness) deleteGracefully(name string, grace int64) {
	h.t.Helper()
	pod, err := h.get(name)
	if err != nil {
		h.t.Fatal(err)
	}
	pod.DeletionTimestamp = ptr.To(metav1.Now())
	pod.DeletionGracePeriodSeconds = ptr.To(grace)
	if err := h.cs.Tracker().Update(podsGVR, pod, testNS); err != nil {
		h.t.Fatal(err)
	}
}

// logs calls the containerLogs handler.
func (h *harness) logs(pod, container, query string) (int, string) {
	h.t.Helper()
	return callLogs(h.a, testNS, pod, container, query)
}

func waitFile(t *testing.T, path string) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return string(b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s did not appear", path)
	return ""
}

// worldDir is a temporary directory that containers running as any user can
// write to.
func worldDir(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "world")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

func terminated(p *corev1.Pod, container string) *corev1.ContainerStateTerminated {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == container {
			return cs.State.Terminated
		}
	}
	return nil
}

// testPKI is a client CA and a client certificate it signed.
type testPKI struct {
	caFile string
	client tls.Certificate
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test-client-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "client-ca.crt")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644); err != nil {
		t.Fatal(err)
	}
	return &testPKI{caFile: caFile, client: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}}
}
