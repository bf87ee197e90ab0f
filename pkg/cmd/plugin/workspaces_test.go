package plugin

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

func newWorkspace(name string, change func(*v1alpha1.TerraformWorkspace)) v1alpha1.TerraformWorkspace {
	ws := v1alpha1.TerraformWorkspace{
		TypeMeta:   metav1.TypeMeta{Kind: "TerraformWorkspace", APIVersion: v1alpha1.SchemeGroupVersion.String()},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace, CreationTimestamp: metav1.NewTime(time.Now().Add(-2 * time.Hour))},
	}
	if change != nil {
		change(&ws)
	}
	return ws
}

// TestWorkspaces checks the list of workspaces: by name, with their
// conditions, suspension and runs.
func TestWorkspaces(t *testing.T) {
	list := &v1alpha1.TerraformWorkspaceList{
		TypeMeta: metav1.TypeMeta{Kind: "TerraformWorkspaceList", APIVersion: v1alpha1.SchemeGroupVersion.String()},
		Items: []v1alpha1.TerraformWorkspace{
			newWorkspace("web", func(ws *v1alpha1.TerraformWorkspace) {
				ws.Spec.Suspend = true
				ws.Status.LastAppliedRun = "web-4"
				meta.SetStatusCondition(&ws.Status.Conditions, metav1.Condition{Type: v1alpha1.WorkspaceConditionReady, Status: metav1.ConditionTrue, Reason: "Applied"})
				meta.SetStatusCondition(&ws.Status.Conditions, metav1.Condition{Type: v1alpha1.WorkspaceConditionDrifted, Status: metav1.ConditionTrue, Reason: "ChangesFound"})
			}),
			newWorkspace("net", func(ws *v1alpha1.TerraformWorkspace) { ws.Status.CurrentRun = "net-1" }),
		},
	}
	srv := newFakeServer(t, map[string]http.HandlerFunc{"GET /terraformworkspaces": object(list)})
	r := srv.run(t, "", "workspaces")
	var got []string
	for _, l := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		got = append(got, strings.Join(strings.Fields(l), " "))
	}
	want := []string{"NAME READY DRIFTED SUSPENDED CURRENT-RUN LAST-APPLIED AGE", "net - - false net-1 - 120m", "web True True true - web-4 120m"}
	if r.code != ExitSucceeded || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("workspaces: exit %d\n%s\nwant\n%s", r.code, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	srv = newFakeServer(t, map[string]http.HandlerFunc{"GET /apis/terrarun.dev/v1alpha1/terraformworkspaces": object(list)})
	if r := srv.run(t, "", "workspaces", "-A"); r.code != ExitSucceeded || !strings.HasPrefix(r.stdout, "NAMESPACE") {
		t.Errorf("workspaces -A: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// -o as kubectl get prints, and a row per change with -w.
	list.Items[1].Spec.DependsOn = []v1alpha1.WorkspaceReference{{Name: "web"}}
	srv = newFakeServer(t, map[string]http.HandlerFunc{"GET /terraformworkspaces": object(list)})
	if r := srv.run(t, "", "workspaces", "-o", "wide"); r.code != ExitSucceeded || !strings.Contains(r.stdout, "DEPENDS-ON") || !regexp.MustCompile(`(?m)^net .* web\s+-$`).MatchString(r.stdout) {
		t.Errorf("workspaces -o wide: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	srv.run(t, "", "workspaces", "-o", "name").expect(t, ExitSucceeded, "terraformworkspace.terrarun.dev/net\nterraformworkspace.terrarun.dev/web\n")
	r = srv.run(t, "", "workspaces", "-o", "json")
	var got2 struct {
		Kind  string
		Items []v1alpha1.TerraformWorkspace
	}
	if err := json.Unmarshal([]byte(r.stdout), &got2); err != nil || got2.Kind != "List" || len(got2.Items) != 2 || got2.Items[0].Kind != "TerraformWorkspace" {
		t.Errorf("workspaces -o json: %v\n%s", err, r.stdout)
	}
	srv.run(t, "", "workspaces", "-o", "name", "-w").expect(t, ExitFailed, "", "--watch prints the table")
	changed := newWorkspace("net", func(ws *v1alpha1.TerraformWorkspace) { ws.Status.CurrentRun = "net-2" })
	srv = newFakeServer(t, map[string]http.HandlerFunc{"GET /terraformworkspaces": object(list), "WATCH /terraformworkspaces": watchEvents(false, watchEvent{"MODIFIED", changed})})
	r = srv.run(t, "", "workspaces", "-w")
	if lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n"); r.code != ExitSucceeded || len(lines) != 4 || !strings.HasPrefix(lines[3], "net") || !strings.Contains(lines[3], "net-2") {
		t.Errorf("workspaces -w: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestSuspendResume checks the patch each sends and what it prints.
func TestSuspendResume(t *testing.T) {
	for verb, want := range map[string]string{"suspend": `{"spec":{"suspend":true}}`, "resume": `{"spec":{"suspend":false}}`} {
		t.Run(verb, func(t *testing.T) {
			ws := newWorkspace("web", nil)
			srv := newFakeServer(t, map[string]http.HandlerFunc{"PATCH /terraformworkspaces/web": object(&ws)})
			r := srv.run(t, "", verb, "web")
			if r.code != ExitSucceeded || !strings.HasPrefix(r.stdout, "Workspace "+testNamespace+"/web "+verb[:len(verb)-1]) {
				t.Errorf("%s: exit %d\n%s%s", verb, r.code, r.stdout, r.stderr)
			}
			if patches := srv.received("PATCH", "/terraformworkspaces/web"); len(patches) != 1 || string(patches[0].body) != want {
				t.Errorf("patched %v, want %s", patches, want)
			}
		})
	}
	srv := newFakeServer(t, map[string]http.HandlerFunc{"PATCH /terraformworkspaces/web": status(http.StatusForbidden, metav1.StatusReasonForbidden,
		`terraformworkspaces.terrarun.dev "web" is forbidden: User "vic" cannot patch resource "terraformworkspaces"`)})
	srv.run(t, "", "suspend", "web").expect(t, ExitFailed, "", `error: terraformworkspaces.terrarun.dev "web" is forbidden: User "vic" cannot patch resource "terraformworkspaces"`+"\n")
}

// TestCompletion: a RUN argument completes with the namespace's runs, a
// WORKSPACE argument with its workspaces, as cobra's __complete (which
// kubectl_complete-terrarun answers) prints them.
func TestCompletion(t *testing.T) {
	newer := func(run *v1alpha1.TerraformRun) {
		run.CreationTimestamp = metav1.NewTime(run.CreationTimestamp.Add(time.Minute))
	}
	runs := &v1alpha1.TerraformRunList{Items: []v1alpha1.TerraformRun{*newRun("web-1", "", "", nil), *newRun("web-2", "", "", newer), *newRun("db-1", "", "", nil)}}
	workspaces := &v1alpha1.TerraformWorkspaceList{Items: []v1alpha1.TerraformWorkspace{newWorkspace("web", nil), newWorkspace("db", nil)}}
	srv := newFakeServer(t, map[string]http.HandlerFunc{"GET /terraformruns": object(runs), "GET /terraformworkspaces": object(workspaces)})
	if r := srv.run(t, "", "__complete", "approve", "web"); r.code != ExitSucceeded || !strings.HasPrefix(r.stdout, "web-2\nweb-1\n:4\n") {
		t.Errorf("approve web<TAB>: exit %d\n%s", r.code, r.stdout)
	}
	if r := srv.run(t, "", "__complete", "suspend", "d"); r.code != ExitSucceeded || !strings.HasPrefix(r.stdout, "db\n:4\n") {
		t.Errorf("suspend d<TAB>: exit %d\n%s", r.code, r.stdout)
	}
	if r := srv.run(t, "", "__complete", "approve", "web-1", ""); r.code != ExitSucceeded || !strings.HasPrefix(r.stdout, ":4\n") {
		t.Errorf("approve web-1 <TAB>: exit %d\n%s", r.code, r.stdout)
	}
	for _, list := range []string{"runs", "workspaces"} {
		if r := srv.run(t, "", "__complete", list, "-o", ""); r.code != ExitSucceeded || !strings.HasPrefix(r.stdout, "wide\njson\nyaml\nname\n:4\n") {
			t.Errorf("%s -o <TAB>: exit %d\n%s", list, r.code, r.stdout)
		}
	}
}

// TestVersion prints the plugin's version and the server's.
func TestVersion(t *testing.T) {
	srv := newFakeServer(t, map[string]http.HandlerFunc{"GET /version": object(map[string]string{"gitVersion": "v1.37.0+terrarun.abc"})})
	srv.run(t, "", "version").expect(t, ExitSucceeded, "Plugin Version: dev\nServer Version: v1.37.0+terrarun.abc\n")
}

// TestGraph prints the workspaces dependencies first, and as a digraph.
func TestGraph(t *testing.T) {
	dependsOn := func(names ...string) func(*v1alpha1.TerraformWorkspace) {
		return func(ws *v1alpha1.TerraformWorkspace) {
			for _, n := range names {
				ws.Spec.DependsOn = append(ws.Spec.DependsOn, v1alpha1.WorkspaceReference{Name: n})
			}
		}
	}
	list := &v1alpha1.TerraformWorkspaceList{Items: []v1alpha1.TerraformWorkspace{
		newWorkspace("app", dependsOn("network", "dns")), newWorkspace("dns", dependsOn("network")), newWorkspace("network", nil), newWorkspace("audit", nil),
	}}
	srv := newFakeServer(t, map[string]http.HandlerFunc{"GET /terraformworkspaces": object(list)})
	r := srv.run(t, "", "graph")
	var got []string
	for _, l := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		got = append(got, strings.Join(strings.Fields(l), " "))
	}
	if want := "WORKSPACE DEPENDS-ON|audit -|network -|dns network|app network, dns"; r.code != ExitSucceeded || strings.Join(got, "|") != want {
		t.Errorf("graph: exit %d\n%s\nwant %s", r.code, r.stdout, want)
	}
	r = srv.run(t, "", "graph", "--dot")
	if r.code != ExitSucceeded || !strings.HasPrefix(r.stdout, `digraph "team-a" {`) || !strings.Contains(r.stdout, `"app" -> "dns";`) {
		t.Errorf("graph --dot: exit %d\n%s", r.code, r.stdout)
	}
}
