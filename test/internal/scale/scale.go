// Package scale stores finished runs by the thousand, as the controller and
// the executors leave them, for the benchmarks that measure a server holding
// many: test/bench's StoredRuns (standalone, embedded etcd) and
// test/benchcrd's StoredRuns (terrarun-apiserver behind kube-apiserver, with
// an etcd of its own).
package scale

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/artifacts"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned"
	"github.com/terrarun/terrarun/pkg/generated/clientset/versioned/scheme"
	"github.com/terrarun/terrarun/test/internal/harness"
)

const (
	// RunsPerNamespace is how many runs each namespace (Namespace) holds.
	RunsPerNamespace = 1000
	// writers store runs concurrently.
	writers = 16
	// Per run: a plan log of planLogLines and an apply log of applyLogLines
	// lines of about 70 bytes, the plan text, redacted JSON and file, and
	// outputs.
	planLogLines  = 150
	applyLogLines = 100
)

// Namespace is the namespace of the i-th stored run (from 1).
func Namespace(i int) string { return fmt.Sprintf("scale-%03d", (i-1)/RunsPerNamespace) }

// Artifacts are the artifacts every stored run gets.
type Artifacts struct {
	planText, planJSON, planFile, outputs, planLog, applyLog []byte
}

// NewArtifacts returns the artifacts of a run that planned and applied 12
// resources: about 30 KB.
func NewArtifacts() *Artifacts {
	var planText, planJSON bytes.Buffer
	planText.WriteString("OpenTofu will perform the following actions:\n\n")
	planJSON.WriteString(`{"format_version":"1.2","resource_changes":[`)
	for i := range 12 {
		fmt.Fprintf(&planText, "  # terraform_data.item[%d] will be created\n  + resource \"terraform_data\" \"item\" {\n      + id     = (known after apply)\n      + input  = \"value-%d\"\n    }\n\n", i, i)
		if i > 0 {
			planJSON.WriteByte(',')
		}
		fmt.Fprintf(&planJSON, `{"address":"terraform_data.item[%d]","type":"terraform_data","change":{"actions":["create"],"after":{"input":"value-%d"},"after_unknown":{"id":true}}}`, i, i)
	}
	planText.WriteString("Plan: 12 to add, 0 to change, 0 to destroy.\n")
	planJSON.WriteString("]}")
	planFile := make([]byte, 3<<10)
	_, _ = rand.Read(planFile) // a zip: incompressible
	logOf := func(stage string, n int) []byte {
		var l bytes.Buffer
		for i := range n {
			fmt.Fprintf(&l, "terraform_data.item[%d]: %s complete after 0s [id=5f2d7c1e-9a3b-4c6d-8e0f-%012d]\n", i%12, stage, i)
		}
		return l.Bytes()
	}
	return &Artifacts{
		planText: planText.Bytes(), planJSON: planJSON.Bytes(), planFile: planFile,
		outputs: []byte(`{"greeting":{"sensitive":false,"type":"string","value":"hello"}}`),
		planLog: logOf("Refreshing", planLogLines), applyLog: logOf("Creation", applyLogLines),
	}
}

// Size is the bytes of artifacts and logs of one run.
func (a *Artifacts) Size() int {
	return len(a.planText) + len(a.planJSON) + len(a.planFile) + len(a.outputs) + len(a.planLog) + len(a.applyLog)
}

// Run is a run as the benchmarks create it: an inline configuration and
// the defaults.
func Run(name string) *v1alpha1.TerraformRun {
	return &v1alpha1.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.TerraformRunSpec{
			Source: v1alpha1.Source{Inline: map[string]string{"main.tf": harness.BenchTF}},
		},
	}
}

// Store stores runs from+1 … from+n, 16 at a time: created, their status
// that of a finished run, their artifacts and logs written through store.
// Their namespaces (Namespace) must exist where the server checks.
func Store(ctx context.Context, client versioned.Interface, store *artifacts.Store, art *Artifacts, from, n int) error {
	var next atomic.Int64
	next.Store(int64(from))
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1))
				if i > from+n || ctx.Err() != nil {
					return
				}
				if err := storeRun(ctx, client, store, art, i); err != nil {
					errs <- fmt.Errorf("run %d: %w", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func storeRun(ctx context.Context, client versioned.Interface, store *artifacts.Store, art *Artifacts, i int) error {
	ns := Namespace(i)
	runs := client.TerrarunV1alpha1().TerraformRuns(ns)
	run := Run(fmt.Sprintf("run-%06d", i))
	run.Spec.Workspace = "app"
	run, err := runs.Create(ctx, run, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	now := metav1.Now()
	start := metav1.NewTime(now.Add(-40 * time.Second))
	run.Status = v1alpha1.TerraformRunStatus{
		Phase:              v1alpha1.RunPhase("Succeeded"),
		ObservedGeneration: run.Generation,
		Plan:               &v1alpha1.PlanSummary{Digest: "sha256:" + strings.Repeat("ab", 32), Add: 12, HasChanges: true},
		Stages: []v1alpha1.StageStatus{
			{Name: "plan", Attempt: 1, Job: run.Name + "-plan-1", StartTime: &start, CompletionTime: &now, ExitCode: ptr.To[int32](0)},
			{Name: "apply", Attempt: 1, Job: run.Name + "-apply-1", StartTime: &start, CompletionTime: &now, ExitCode: ptr.To[int32](0)},
		},
		StartTime: &start, CompletionTime: &now,
		Message: "Applied: 12 added, 0 changed, 0 destroyed.",
	}
	for _, c := range []string{"Planned", "Approved", "Applied", "Complete", "Ready"} {
		meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{Type: c, Status: metav1.ConditionTrue, Reason: "Succeeded", Message: "Applied: 12 added.", ObservedGeneration: run.Generation})
	}
	if _, err := runs.UpdateStatus(ctx, run, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("status: %w", err)
	}
	ref := artifacts.RunRef{Namespace: ns, Name: run.Name, UID: string(run.UID)}
	for kind, data := range map[artifacts.Kind][]byte{
		artifacts.PlanText: art.planText, artifacts.PlanJSON: art.planJSON, artifacts.PlanFile: art.planFile, artifacts.Outputs: art.outputs,
	} {
		if _, err := store.Put(ctx, ref, kind, bytes.NewReader(data)); err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
	}
	for stage, log := range map[string][]byte{"plan": art.planLog, "apply": art.applyLog} {
		if err := store.AppendLog(ctx, ref, stage, 1, log); err != nil {
			return fmt.Errorf("%s log: %w", stage, err)
		}
		if err := store.CloseLog(ctx, ref, stage, 1); err != nil {
			return fmt.Errorf("%s log: %w", stage, err)
		}
	}
	return nil
}

// Lists are the p50 and p99 of LISTs of a 1,000-run namespace in each
// format: Read until the body's last byte (the server's part), Decoded
// into a TerraformRunList as a client does.
type Lists struct {
	JSONRead, JSONDecoded, ProtobufRead, ProtobufDecoded [2]time.Duration
}

// ListLatencies lists the first namespace (RunsPerNamespace runs) 20 times
// in JSON and 20 times in protobuf, alternating, with cfg's credentials.
func ListLatencies(ctx context.Context, cfg *rest.Config) (Lists, error) {
	var l Lists
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return l, err
	}
	url := strings.TrimSuffix(cfg.Host, "/") + "/apis/terrarun.dev/v1alpha1/namespaces/" + Namespace(1) + "/terraformruns"
	var reads, decodes [2][]time.Duration
	for i := range 40 {
		accept := []string{runtime.ContentTypeJSON, runtime.ContentTypeProtobuf}[i%2]
		var list v1alpha1.TerraformRunList
		read, decoded, _, err := harness.TimedGet(ctx, hc, url, accept, scheme.Codecs.UniversalDeserializer(), &list)
		if err != nil {
			return l, err
		}
		if len(list.Items) != RunsPerNamespace {
			return l, fmt.Errorf("LIST %s in %s: %d runs, want %d", Namespace(1), accept, len(list.Items), RunsPerNamespace)
		}
		reads[i%2] = append(reads[i%2], read)
		decodes[i%2] = append(decodes[i%2], decoded)
	}
	l.JSONRead, l.JSONDecoded = P50P99(reads[0]), P50P99(decodes[0])
	l.ProtobufRead, l.ProtobufDecoded = P50P99(reads[1]), P50P99(decodes[1])
	return l, nil
}

// P50P99 sorts d and returns its median and 99th percentile.
func P50P99(d []time.Duration) [2]time.Duration {
	slices.Sort(d)
	return [2]time.Duration{harness.Percentile(d, 0.5), harness.Percentile(d, 0.99)}
}
