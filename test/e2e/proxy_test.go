package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// newServiceProxy routes TCP connections to listen to the ready endpoints of
// a Service, as kube-proxy routes its ClusterIP (there is none here): each
// connection goes to the next ready endpoint, in turn, skipping those that
// refuse it. It returns the address it listens on, and stops with ctx.
func newServiceProxy(ctx context.Context, kube kubernetes.Interface, listen, namespace, service string) (string, error) {
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return "", fmt.Errorf("the proxy for Service %s/%s: %w", namespace, service, err)
	}
	go func() {
		<-ctx.Done()
		l.Close()
	}()
	var next atomic.Uint64
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				backend, err := dialEndpoint(ctx, kube, namespace, service, next.Add(1))
				if err != nil {
					return
				}
				defer backend.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(backend, conn); done <- struct{}{} }()
				go func() { _, _ = io.Copy(conn, backend); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	return l.Addr().String(), nil
}

// dialEndpoint connects to a ready endpoint of the Service, starting at the
// n-th.
func dialEndpoint(ctx context.Context, kube kubernetes.Interface, namespace, service string, n uint64) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	slices, err := kube.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
	if err != nil {
		return nil, err
	}
	var addrs []string
	for _, s := range slices.Items {
		for _, p := range s.Ports {
			if p.Port == nil {
				continue
			}
			for _, e := range s.Endpoints {
				if e.Conditions.Ready != nil && !*e.Conditions.Ready {
					continue
				}
				for _, a := range e.Addresses {
					addrs = append(addrs, net.JoinHostPort(a, strconv.Itoa(int(*p.Port))))
				}
			}
		}
	}
	var d net.Dialer
	for i := range addrs {
		conn, err := d.DialContext(ctx, "tcp", addrs[(int(n)+i)%len(addrs)])
		if err == nil {
			return conn, nil
		}
	}
	return nil, fmt.Errorf("no ready endpoint of Service %s/%s answers", namespace, service)
}
