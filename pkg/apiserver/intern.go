package apiserver

import (
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

// Bounds of an internTable: past either, it starts afresh (the strings
// already shared stay shared). A string longer than internMaxLen is never
// interned.
const (
	internMaxEntries = 1 << 14
	internMaxBytes   = 16 << 20
	internMaxLen     = 64 << 10
)

// internTable hands out one copy of each string, and of each byte slice,
// it has seen.
type internTable struct {
	mu    sync.Mutex
	m     map[string]string
	raw   map[string][]byte
	bytes int
}

// interningCodec decodes as its Codec does, then makes the strings that
// repeat from one stored run to the next (namespaces, creators, the
// configuration, labels, conditions, managers of fields) share a single
// copy. The watch cache holds every stored run decoded, so each string it
// does not repeat is memory saved per stored run (docs/benchmarks.md,
// "Memory per stored run"). Names, UIDs, digests and times, which differ
// for every run, are left alone.
type interningCodec struct {
	runtime.Codec
	table *internTable
}

// Decode decodes data, then interns the strings of a TerraformRun.
func (c interningCodec) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	obj, gvk, err := c.Codec.Decode(data, defaults, into)
	if run, ok := obj.(*terrarun.TerraformRun); ok && err == nil {
		c.table.run(run)
	}
	return obj, gvk, err
}

// run interns the repeating strings of r in place.
func (t *internTable) run(r *terrarun.TerraformRun) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.objectMeta(&r.ObjectMeta)

	s := &r.Spec
	t.str((*string)(&s.Operation))
	s.Source.Inline = t.stringMap(s.Source.Inline)
	if cm := s.Source.ConfigMap; cm != nil {
		t.str(&cm.Name)
	}
	if g := s.Source.Git; g != nil {
		t.strs(&g.URL, &g.Ref, &g.Path, &g.CredentialsSecret)
	}
	if o := s.Source.OCI; o != nil {
		t.strs(&o.URL, &o.Path, &o.CredentialsSecret, &o.CertSecret)
		if r := o.Ref; r != nil {
			t.strs(&r.Tag, &r.Semver)
		}
		if v := o.Verify; v != nil {
			t.strs(&v.Provider, &v.KeysSecret, &v.TrustedKeys, &v.TrustedRootSecret)
		}
	}
	if f := s.Source.SourceRef; f != nil {
		t.strs(&f.Kind, &f.Name, &f.Path)
	}
	for i := range s.Variables {
		v := &s.Variables[i]
		t.strs(&v.Name, &v.Value)
		if f := v.ValueFrom; f != nil {
			for _, k := range []*terrarun.KeySelector{f.SecretKeyRef, f.ConfigMapKeyRef} {
				if k != nil {
					t.strs(&k.Name, &k.Key)
				}
			}
			for _, o := range []*terrarun.OutputSelector{f.RunOutput, f.WorkspaceOutput} {
				if o != nil {
					t.strs(&o.Name, &o.Output)
				}
			}
		}
	}
	if b := s.Backend; b != nil {
		t.strs(&b.Type, &b.ConfigSecret)
		b.Config = t.stringMap(b.Config)
	}
	t.strs(&s.Workspace, (*string)(&s.Approval.Mode), (*string)(&s.Engine.Binary), &s.Engine.Image, &s.OutputsSecret)
	if e := s.Executor; e != nil {
		t.str(&e.ServiceAccountName)
		e.NodeSelector = t.stringMap(e.NodeSelector)
	}
	t.slice(s.Targets)
	t.slice(s.Replace)
	if c := s.Creator; c != nil {
		t.strs(&c.Username, &c.UID)
		t.slice(c.Groups)
	}

	st := &r.Status
	t.strs((*string)(&st.Phase), &st.Message)
	for i := range st.Conditions {
		c := &st.Conditions[i]
		t.strs(&c.Type, (*string)(&c.Status), &c.Reason, &c.Message)
	}
	for i := range st.Approvals {
		t.str(&st.Approvals[i].ApprovedBy)
	}
	if a := st.Approval; a != nil {
		t.str(&a.ApprovedBy)
	}
	for i := range st.Stages {
		t.strs((*string)(&st.Stages[i].Name), &st.Stages[i].Reason)
	}
	for i := range st.Outputs {
		t.strs(&st.Outputs[i].Name, (*string)(&st.Outputs[i].ValueOmitted))
	}
}

// objectMeta interns what repeats in metadata.
func (t *internTable) objectMeta(m *metav1.ObjectMeta) {
	t.strs(&m.Namespace, &m.GenerateName)
	m.Labels = t.stringMap(m.Labels)
	m.Annotations = t.stringMap(m.Annotations)
	t.slice(m.Finalizers)
	for i := range m.OwnerReferences {
		o := &m.OwnerReferences[i]
		t.strs(&o.APIVersion, &o.Kind, &o.Name)
	}
	for i := range m.ManagedFields {
		f := &m.ManagedFields[i]
		t.strs(&f.Manager, (*string)(&f.Operation), &f.APIVersion, &f.FieldsType, &f.Subresource)
		// The set of fields a manager owns: the same for runs written
		// alike, and the largest part of a stored run's metadata. Shared
		// read-only, as every object the watch cache hands out is.
		if f.FieldsV1 != nil {
			f.FieldsV1.Raw = t.getBytes(f.FieldsV1.Raw)
		}
	}
}

// stringMap returns m with its keys and values interned: a new map, as a
// map's keys cannot be replaced in place.
func (t *internTable) stringMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[t.get(k)] = t.get(v)
	}
	return out
}

func (t *internTable) slice(s []string) {
	for i := range s {
		t.str(&s[i])
	}
}

func (t *internTable) strs(ps ...*string) {
	for _, p := range ps {
		t.str(p)
	}
}

func (t *internTable) str(p *string) { *p = t.get(*p) }

// get returns the table's copy of s, which becomes s if it has none.
// The caller holds t.mu.
func (t *internTable) get(s string) string {
	if s == "" || len(s) > internMaxLen {
		return s
	}
	if c, ok := t.m[s]; ok {
		return c
	}
	t.makeRoom(len(s))
	t.m[s] = s
	return s
}

// getBytes is get for a byte slice, which must not be written to after.
func (t *internTable) getBytes(b []byte) []byte {
	if len(b) == 0 || len(b) > internMaxLen {
		return b
	}
	if c, ok := t.raw[string(b)]; ok {
		return c
	}
	t.makeRoom(len(b))
	t.raw[string(b)] = b
	return b
}

// makeRoom starts the table afresh if adding n bytes would take it past
// its bounds, and accounts for them.
func (t *internTable) makeRoom(n int) {
	if t.m == nil || len(t.m)+len(t.raw) >= internMaxEntries || t.bytes+n > internMaxBytes {
		t.m, t.raw, t.bytes = make(map[string]string), make(map[string][]byte), 0
	}
	t.bytes += n
}
