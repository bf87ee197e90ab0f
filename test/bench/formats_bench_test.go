package bench

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/rest"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned/scheme"
	"github.com/terrarun/terrarun/test/internal/harness"
)

// BenchmarkListFormats lists the same 10,000 runs in JSON, protobuf and CBOR
// (the server runs with --feature-gates=CBORServingAndStorage=true),
// alternating, over one connection: the time to the body read, and to it
// decoded into a TerraformRunList by apimachinery's serializer of the
// format, and the size of the body.
func BenchmarkListFormats(b *testing.B) {
	ctx := benchCtx(b)
	s := getServer(b)
	logLoad(b, "at the start")
	defer logLoad(b, "at the end")
	const size = 10000
	namespace := "bench-formats"
	populate(b, namespace, size)

	rt, err := rest.TransportFor(s.Config)
	if err != nil {
		b.Fatal(err)
	}
	url := strings.TrimSuffix(s.Config.Host, "/") + "/apis/terrarun.dev/v1alpha1/namespaces/" + namespace + "/terraformruns"
	formats := []struct {
		name, accept string
		decoder      runtime.Decoder
	}{
		{"json", "application/json", json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, json.SerializerOptions{})},
		{"protobuf", runtime.ContentTypeProtobuf, protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)},
		{"cbor", "application/cbor", cbor.NewSerializer(scheme.Scheme, scheme.Scheme)},
	}
	hc := &http.Client{Transport: rt}
	list := func(ctx context.Context, accept string, dec runtime.Decoder) (read, decoded time.Duration, n int, err error) {
		var l v1alpha1.TerraformRunList
		if read, decoded, n, err = harness.TimedGet(ctx, hc, url, accept, dec, &l); err != nil {
			return 0, 0, 0, err
		}
		if len(l.Items) != size {
			return 0, 0, 0, fmt.Errorf("the %s list has %d runs, want %d", accept, len(l.Items), size)
		}
		return read, decoded, n, nil
	}
	for _, f := range formats { // warm-up
		if _, _, _, err := list(ctx, f.accept, f.decoder); err != nil {
			b.Fatal(err)
		}
	}
	n := samples(list10kSamples, b)
	reads := map[string][]time.Duration{}
	decodes := map[string][]time.Duration{}
	bytes := map[string]int{}
	b.ResetTimer()
	for i := range n {
		for j := range formats {
			f := formats[(i+j)%len(formats)]
			r, d, size, err := list(ctx, f.accept, f.decoder)
			if err != nil {
				b.Fatal(err)
			}
			reads[f.name] = append(reads[f.name], r)
			decodes[f.name] = append(decodes[f.name], d)
			bytes[f.name] = size
		}
	}
	b.StopTimer()
	for _, f := range formats {
		reportLatency(b, f.name+"-read-", reads[f.name])
		reportLatency(b, f.name+"-decoded-", decodes[f.name])
		b.ReportMetric(float64(bytes[f.name])/(1<<20), f.name+"-MiB")
	}
	for _, f := range formats[1:] {
		b.ReportMetric(float64(median(decodes[f.name]))/float64(median(decodes["json"])), f.name+"/json-decoded-p50")
		b.ReportMetric(float64(median(reads[f.name]))/float64(median(reads["json"])), f.name+"/json-read-p50")
	}
}
