package terraformrun

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/artifacts"
	"github.com/terrarun/terrarun/pkg/executor"
)

// OutputsSecretPublisher writes a run's outputs to the Secret named by
// spec.outputsSecret, in the run's namespace of the host cluster, owned by the
// run so that it is removed with it (see PublishOutputs).
func OutputsSecretPublisher(client kubernetes.Interface, store OutputsReader) func(context.Context, *v1alpha1.TerraformRun) error {
	return func(ctx context.Context, run *v1alpha1.TerraformRun) error {
		if run.Spec.OutputsSecret == "" {
			return nil
		}
		return PublishOutputs(ctx, client, store, run, run.Spec.OutputsSecret, metav1.OwnerReference{
			APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "TerraformRun", Name: run.Name, UID: run.UID,
		})
	}
}

// PublishOutputs writes the outputs of run to Secret name in the run's
// namespace of the host cluster, owned by owner, labeled with the run: string
// outputs as they are, others as JSON. A Secret of that name that owner does
// not own is left alone, with an error; one that already holds run's
// outputs is not written again.
func PublishOutputs(ctx context.Context, client kubernetes.Interface, store OutputsReader, run *v1alpha1.TerraformRun, name string, owner metav1.OwnerReference) error {
	secrets := client.CoreV1().Secrets(run.Namespace)
	existing, err := secrets.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		existing = nil
	case err != nil:
		return err
	}
	if existing != nil {
		owned := false
		for _, ref := range existing.OwnerReferences {
			owned = owned || ref.UID == owner.UID
		}
		if !owned {
			return fmt.Errorf("secret %s/%s exists and is not owned by %s %s; choose another outputsSecret or delete it", run.Namespace, name, owner.Kind, owner.Name)
		}
		if existing.Labels[outputsRunLabel] == run.Name {
			return nil
		}
	}
	outputs, err := readOutputs(ctx, store, run)
	if err != nil {
		return err
	}
	data := make(map[string][]byte, len(outputs))
	for name, value := range outputs {
		var s string
		if err := json.Unmarshal(value, &s); err == nil {
			data[name] = []byte(s)
		} else {
			data[name] = []byte(value)
		}
	}
	if existing == nil {
		_, err = secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: run.Namespace,
				Labels:          map[string]string{outputsRunLabel: run.Name},
				OwnerReferences: []metav1.OwnerReference{owner},
			},
			Type: corev1.SecretTypeOpaque,
			Data: data,
		}, metav1.CreateOptions{})
		return err
	}
	existing.Data = data
	if existing.Labels == nil {
		existing.Labels = map[string]string{}
	}
	existing.Labels[outputsRunLabel] = run.Name
	_, err = secrets.Update(ctx, existing, metav1.UpdateOptions{})
	return err
}

// outputsRunLabel names the run whose outputs an outputs Secret holds.
const outputsRunLabel = "terrarun.dev/run"

// readOutputs returns the values of a run's outputs, as JSON, by name.
func readOutputs(ctx context.Context, store OutputsReader, run *v1alpha1.TerraformRun) (map[string]json.RawMessage, error) {
	rc, _, err := store.Get(ctx, artifacts.RunRef{Namespace: run.Namespace, Name: run.Name, UID: string(run.UID)}, artifacts.Outputs)
	if err != nil {
		return nil, fmt.Errorf("reading the outputs of run %s: %w", run.Name, err)
	}
	defer rc.Close()
	raw, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("reading the outputs of run %s: %w", run.Name, err)
	}
	var outputs map[string]struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(raw, &outputs); err != nil {
		return nil, fmt.Errorf("decoding the outputs of run %s: %w", run.Name, err)
	}
	values := make(map[string]json.RawMessage, len(outputs))
	for name, o := range outputs {
		values[name] = o.Value
	}
	return values, nil
}

// resolveInputs reads the values of the run's variables that read other
// runs' outputs (valueFrom.runOutput). A run that does not exist, has not
// succeeded or has no such output is an invalid reference.
func (c *Controller) resolveInputs(ctx context.Context, run *v1alpha1.TerraformRun) (map[string][]byte, error) {
	var inputs map[string][]byte
	for _, v := range run.Spec.Variables {
		if v.ValueFrom == nil || v.ValueFrom.RunOutput == nil {
			continue
		}
		sel := v.ValueFrom.RunOutput
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: variable %s reads output %q of run %s, which %s", executor.ErrInvalidReference, v.Name, sel.Output, sel.Name, fmt.Sprintf(format, args...))
		}
		up, err := c.lister.TerraformRuns(run.Namespace).Get(sel.Name)
		switch {
		case apierrors.IsNotFound(err):
			return nil, bad("does not exist")
		case err != nil:
			return nil, err
		case up.Status.Phase != v1alpha1.RunPhaseSucceeded:
			return nil, bad("has not succeeded (it is %s)", up.Status.Phase)
		case c.artifacts == nil:
			return nil, bad("cannot be read: this server stores no artifacts")
		}
		outputs, err := readOutputs(ctx, c.artifacts, up)
		if err != nil {
			return nil, err
		}
		value, ok := outputs[sel.Output]
		if !ok {
			return nil, bad("has no such output")
		}
		if inputs == nil {
			inputs = map[string][]byte{}
		}
		inputs[v.Name] = value
	}
	return inputs, nil
}
