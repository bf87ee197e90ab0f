package job

import (
	"fmt"
	"reflect"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Adoption. The Job and stage Secret of an execution have deterministic
// names, so anyone who may create Secrets or Jobs in the run's namespace can
// create them first, with the run's labels (its UID is readable by its
// viewers). A stage Secret whose stage.json names another server would hand
// the executor's token to whoever runs it. So an object of those names is
// adopted only when it holds exactly what terrarun builds for the execution:
// the labels say whose it claims to be, the content whether it is.

// checkSecret refuses an existing stage Secret that is not the one built.
func checkSecret(existing, built *corev1.Secret, uid string) error {
	if err := checkOwned(&existing.ObjectMeta, "Secret", uid); err != nil {
		return err
	}
	var differs string
	switch {
	case existing.Type != built.Type:
		differs = "type"
	case !ptr.Deref(existing.Immutable, false):
		differs = "immutable"
	case !equality.Semantic.DeepEqual(existing.Data, built.Data):
		differs = "data"
	default:
		return nil
	}
	return notBuilt("Secret", &existing.ObjectMeta, differs)
}

// checkJob refuses an existing Job that is not of the run with UID uid, or
// whose pod template is not the one built: different containers, commands,
// volumes, service account or security settings. Fields the API server
// defaults are compared only where terrarun sets them.
func checkJob(existing, built *batchv1.Job, uid string) error {
	if err := checkOwned(&existing.ObjectMeta, "Job", uid); err != nil {
		return err
	}
	got := withoutDefaults(&existing.Spec.Template.Spec, &built.Spec.Template.Spec)
	want := &built.Spec.Template.Spec
	if equality.Semantic.DeepEqual(got, want) {
		return nil
	}
	return notBuilt("Job", &existing.ObjectMeta, "spec.template.spec."+firstDifference(got, want))
}

// checkOwned refuses an object that is not of the run with UID uid.
func checkOwned(m *metav1.ObjectMeta, kind, uid string) error {
	if got := m.Labels[LabelRunUID]; got != uid {
		return fmt.Errorf("%s %s/%s exists and is not of this run (%s is %q, want %q)", kind, m.Namespace, m.Name, LabelRunUID, got, uid)
	}
	return nil
}

// forgedError is an object of an execution's name that terrarun did not
// build for it.
type forgedError struct {
	name string
	msg  string
}

func (e *forgedError) Error() string { return e.msg }

func notBuilt(kind string, m *metav1.ObjectMeta, field string) error {
	return &forgedError{name: m.Name, msg: fmt.Sprintf("%s %s/%s carries this run's labels but is not the one terrarun builds for it (its %s differs): it was created by someone else or by another version of terrarun; "+
		"delete it and check who may create %ss in namespace %s", kind, m.Namespace, m.Name, field, strings.ToLower(kind), m.Namespace)}
}

// withoutDefaults returns a copy of got in which the fields that the API
// server defaults, and that want leaves unset, are unset too.
func withoutDefaults(got, want *corev1.PodSpec) *corev1.PodSpec {
	out := got.DeepCopy()
	if want.DNSPolicy == "" {
		out.DNSPolicy = ""
	}
	if want.SchedulerName == "" {
		out.SchedulerName = ""
	}
	if want.DeprecatedServiceAccount == "" && out.DeprecatedServiceAccount == want.ServiceAccountName {
		out.DeprecatedServiceAccount = ""
	}
	if len(out.Containers) == len(want.Containers) {
		for i := range out.Containers {
			c, w := &out.Containers[i], &want.Containers[i]
			if w.TerminationMessagePath == "" && c.TerminationMessagePath == corev1.TerminationMessagePathDefault {
				c.TerminationMessagePath = ""
			}
			if w.ImagePullPolicy == "" {
				c.ImagePullPolicy = ""
			}
		}
	}
	if len(out.Volumes) == len(want.Volumes) {
		for i := range out.Volumes {
			p, w := out.Volumes[i].Projected, want.Volumes[i].Projected
			if p != nil && w != nil && w.DefaultMode == nil {
				p.DefaultMode = nil
			}
		}
	}
	return out
}

// firstDifference names, by its JSON name, the first field in which two pod
// specs differ.
func firstDifference(a, b *corev1.PodSpec) string {
	va, vb := reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem()
	for i := range va.NumField() {
		if !equality.Semantic.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			name, _, _ := strings.Cut(va.Type().Field(i).Tag.Get("json"), ",")
			return name
		}
	}
	return "content"
}
