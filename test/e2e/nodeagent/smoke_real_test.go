package nodeagent

// Temporary smoke test against a real etcd + kube-apiserver +
// kube-controller-manager; not part of the package.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

type smokePKI struct {
	dir    string
	caKey  *ecdsa.PrivateKey
	ca     *x509.Certificate
	caFile string
}

func (p *smokePKI) issue(t *testing.T, name, cn string, orgs []string, ips []net.IP, server bool) (certFile, keyFile string) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if server {
		usage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage, IPAddresses: ips,
		DNSNames: []string{"localhost", "kubernetes.default.svc"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(p.dir, name+".crt"), filepath.Join(p.dir, name+".key")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return
}

func newSmokePKI(t *testing.T, dir string) *smokePKI {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "smoke-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	ca, _ := x509.ParseCertificate(der)
	caFile := filepath.Join(dir, "ca.crt")
	os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	return &smokePKI{dir: dir, caKey: key, ca: ca, caFile: caFile}
}

func startProc(t *testing.T, dir, name string, args ...string) {
	log, _ := os.Create(filepath.Join(dir, name+".log"))
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); log.Close() })
}

func TestSmokeRealCluster(t *testing.T) {
	bin := os.Getenv("SMOKE_BIN")
	if bin == "" {
		t.Skip("SMOKE_BIN unset")
	}
	dir, _ := os.MkdirTemp("", "smoke")
	t.Logf("dir %s", dir)
	pki := newSmokePKI(t, dir)
	lo := []net.IP{net.ParseIP("10.214.0.1"), net.ParseIP("10.0.0.1")}
	srvCert, srvKey := pki.issue(t, "apiserver", "kube-apiserver", nil, lo, true)
	kcCert, kcKey := pki.issue(t, "kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, nil, false)
	admCert, admKey := pki.issue(t, "admin", "admin", []string{"system:masters"}, nil, false)
	saKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	saDER, _ := x509.MarshalECPrivateKey(saKey)
	pubDER, _ := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	os.WriteFile(filepath.Join(dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saDER}), 0o600)
	os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644)

	startProc(t, dir, "etcd", filepath.Join(bin, "etcd"), "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", "http://127.0.0.1:23790", "--advertise-client-urls", "http://127.0.0.1:23790",
		"--listen-peer-urls", "http://127.0.0.1:23800", "--initial-advertise-peer-urls", "http://127.0.0.1:23800",
		"--initial-cluster", "default=http://127.0.0.1:23800")
	startProc(t, dir, "kube-apiserver", filepath.Join(bin, "kube-apiserver"),
		"--etcd-servers", "http://127.0.0.1:23790", "--bind-address", "10.214.0.1", "--advertise-address", "10.214.0.1",
		"--secure-port", "16443", "--tls-cert-file", srvCert, "--tls-private-key-file", srvKey,
		"--client-ca-file", pki.caFile, "--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", filepath.Join(dir, "sa.pub"), "--service-account-signing-key-file", filepath.Join(dir, "sa.key"),
		"--api-audiences", "https://kubernetes.default.svc",
		"--kubelet-client-certificate", kcCert, "--kubelet-client-key", kcKey, "--kubelet-certificate-authority", pki.caFile,
		"--authorization-mode", "Node,RBAC", "--service-cluster-ip-range", "10.0.0.0/24")
	cfg := &rest.Config{Host: "https://10.214.0.1:16443", TLSClientConfig: rest.TLSClientConfig{CAFile: pki.caFile, CertFile: admCert, KeyFile: admKey}}
	kube := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		b, err := kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && string(b) == "ok" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("apiserver not ready: %v %s", err, b)
		}
		time.Sleep(time.Second)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://10.214.0.1:16443", certificate-authority: %q}}]
users: [{name: u, user: {client-certificate: %q, client-key: %q}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, pki.caFile, admCert, admKey)), 0o600)
	startProc(t, dir, "kube-controller-manager", filepath.Join(bin, "kube-controller-manager"),
		"--kubeconfig", kubeconfig, "--authentication-kubeconfig", kubeconfig, "--authorization-kubeconfig", kubeconfig,
		"--leader-elect=false", "--service-account-private-key-file", filepath.Join(dir, "sa.key"),
		"--root-ca-file", pki.caFile, "--use-service-account-credentials=false", "--bind-address", "127.0.0.1", "--secure-port", "0",
		"--controllers", "*")

	// Node serving cert signed by the CA, so that --kubelet-certificate-authority verifies it.
	nodeCert, nodeKey := pki.issue(t, "kubelet", "node-1", nil, []net.IP{net.ParseIP("10.214.0.1")}, true)
	log := &testLogger{t: t}
	h := &harness{t: t}
	h.start(Options{
		NodeName: testNode, Address: "10.214.0.1", Port: 0, Client: kube, RootDir: filepath.Join(dir, "pods"),
		ServingCert: nodeCert, ServingKey: nodeKey, ClientCAFile: pki.caFile, Logf: log.logf,
	}, log)

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS}}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Wait for the default service account (KCM) and kube-root-ca.crt.
	deadline = time.Now().Add(time.Minute)
	for {
		_, e1 := kube.CoreV1().ServiceAccounts(testNS).Get(ctx, "default", metav1.GetOptions{})
		_, e2 := kube.CoreV1().ConfigMaps(testNS).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		if e1 == nil && e2 == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no default SA / root CA: %v %v", e1, e2)
		}
		time.Sleep(500 * time.Millisecond)
	}

	podSpec := corev1.PodSpec{
		RestartPolicy:                corev1.RestartPolicyNever,
		AutomountServiceAccountToken: ptr.To(false),
		SecurityContext:              &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](65532), RunAsGroup: ptr.To[int64](65532), FSGroup: ptr.To[int64](65532)},
		Containers: []corev1.Container{{
			Name: "main", Image: "busybox",
			Command:      []string{"/bin/sh", "-c", "echo hi; echo token-bytes=$(wc -c < /var/run/secrets/terrarun/token); cat /kube/namespace; echo; exit 3"},
			VolumeMounts: []corev1.VolumeMount{{Name: "tok", MountPath: "/var/run/secrets/terrarun", ReadOnly: true}, {Name: "kube", MountPath: "/kube", ReadOnly: true}},
		}},
		Volumes: []corev1.Volume{
			{Name: "tok", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: "terrarun.dev", ExpirationSeconds: ptr.To[int64](600), Path: "token"}}}}}},
			{Name: "kube", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
				{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
			}}}},
		},
	}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "fails", Namespace: testNS},
		Spec: batchv1.JobSpec{BackoffLimit: ptr.To[int32](0), Template: corev1.PodTemplateSpec{Spec: *podSpec.DeepCopy()}},
	}
	if _, err := kube.BatchV1().Jobs(testNS).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ok := podSpec.DeepCopy()
	ok.Containers[0].Command = []string{"/bin/sh", "-c", "echo fine"}
	job2 := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "works", Namespace: testNS},
		Spec: batchv1.JobSpec{BackoffLimit: ptr.To[int32](0), Template: corev1.PodTemplateSpec{Spec: *ok}},
	}
	if _, err := kube.BatchV1().Jobs(testNS).Create(ctx, job2, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitJob := func(name string, want batchv1.JobConditionType) {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			j, err := kube.BatchV1().Jobs(testNS).Get(ctx, name, metav1.GetOptions{})
			if err == nil {
				for _, c := range j.Status.Conditions {
					if c.Type == want && c.Status == corev1.ConditionTrue {
						t.Logf("job %s: %s (%s)", name, want, c.Reason)
						return
					}
				}
			}
			if time.Now().After(deadline) {
				pods, _ := kube.CoreV1().Pods(testNS).List(ctx, metav1.ListOptions{})
				t.Fatalf("job %s not %s: %+v\npods: %+v", name, want, j.Status, pods.Items)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	waitJob("fails", batchv1.JobFailed)
	waitJob("works", batchv1.JobComplete)
	pods, err := kube.CoreV1().Pods(testNS).List(ctx, metav1.ListOptions{LabelSelector: "job-name=fails"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods %v %v", pods, err)
	}
	p := pods.Items[0]
	t.Logf("pod status: %+v", p.Status.ContainerStatuses)
	logs, err := kube.CoreV1().Pods(testNS).GetLogs(p.Name, &corev1.PodLogOptions{Container: "main"}).DoRaw(ctx)
	t.Logf("logs through kube-apiserver: %q %v", logs, err)
	if err != nil || string(logs)[:3] != "hi\n" {
		t.Errorf("logs %q %v", logs, err)
	}
	kubectl := exec.Command(filepath.Join(bin, "kubectl"), "--kubeconfig", kubeconfig, "-n", testNS, "logs", "job/fails")
	out, err := kubectl.CombinedOutput()
	t.Logf("kubectl logs job/fails: %q %v", out, err)

	// Graceful deletion through the real apiserver.
	sleeper := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sleeper", Namespace: testNS}, Spec: *podSpec.DeepCopy()}
	sleeper.Spec.Containers[0].Command = []string{"/bin/sh", "-c", "trap 'echo bye; exit 0' TERM; while :; do sleep 0.1; done"}
	if _, err := kube.CoreV1().Pods(testNS).Create(ctx, sleeper, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(time.Minute)
	for {
		p, err := kube.CoreV1().Pods(testNS).Get(ctx, "sleeper", metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sleeper not running: %+v", p)
		}
		time.Sleep(200 * time.Millisecond)
	}
	follow, err := kube.CoreV1().Pods(testNS).GetLogs("sleeper", &corev1.PodLogOptions{Follow: true}).Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := kube.CoreV1().Pods(testNS).Delete(ctx, "sleeper", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](20)}); err != nil {
		t.Fatal(err)
	}
	followed := make([]byte, 64)
	n, _ := follow.Read(followed)
	t.Logf("followed: %q", followed[:n])
	for {
		_, err := kube.CoreV1().Pods(testNS).Get(ctx, "sleeper", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			t.Logf("sleeper deleted after %v", time.Since(start))
			break
		}
		if time.Since(start) > time.Minute {
			t.Fatal("sleeper not deleted")
		}
		time.Sleep(100 * time.Millisecond)
	}
	node, _ := kube.CoreV1().Nodes().Get(ctx, testNode, metav1.GetOptions{})
	t.Logf("node taints %v conditions %v", node.Spec.Taints, node.Status.Conditions[len(node.Status.Conditions)-1])
}
