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
)

// OutputsSecretPublisher writes a run's outputs to the Secret named by
// spec.outputsSecret, in the run's namespace of the host cluster, owned by the
// run so that it is removed with it. String outputs are stored as they are;
// other outputs as JSON.
func OutputsSecretPublisher(client kubernetes.Interface, store *artifacts.Store) func(context.Context, *v1alpha1.TerraformRun) error {
	return func(ctx context.Context, run *v1alpha1.TerraformRun) error {
		if run.Spec.OutputsSecret == "" {
			return nil
		}
		rc, _, err := store.Get(ctx, artifacts.RunRef{Namespace: run.Namespace, Name: run.Name, UID: string(run.UID)}, artifacts.Outputs)
		if err != nil {
			return fmt.Errorf("reading the outputs: %w", err)
		}
		defer rc.Close()
		raw, err := io.ReadAll(rc)
		if err != nil {
			return fmt.Errorf("reading the outputs: %w", err)
		}
		var outputs map[string]struct {
			Value json.RawMessage `json:"value"`
		}
		if err := json.Unmarshal(raw, &outputs); err != nil {
			return fmt.Errorf("decoding the outputs: %w", err)
		}
		data := make(map[string][]byte, len(outputs))
		for name, o := range outputs {
			var s string
			if err := json.Unmarshal(o.Value, &s); err == nil {
				data[name] = []byte(s)
			} else {
				data[name] = []byte(o.Value)
			}
		}
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name:      run.Spec.OutputsSecret,
				Namespace: run.Namespace,
				Labels:    map[string]string{"terrarun.dev/run": run.Name},
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: v1alpha1.SchemeGroupVersion.String(),
					Kind:       "TerraformRun",
					Name:       run.Name,
					UID:        run.UID,
				}},
			},
			Type: corev1.SecretTypeOpaque,
			Data: data,
		}
		secrets := client.CoreV1().Secrets(run.Namespace)
		existing, err := secrets.Get(ctx, secret.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = secrets.Create(ctx, secret, metav1.CreateOptions{})
			return err
		case err != nil:
			return err
		}
		owned := false
		for _, ref := range existing.OwnerReferences {
			owned = owned || ref.UID == run.UID
		}
		if !owned {
			return fmt.Errorf("secret %s/%s exists and is not owned by this run; choose another spec.outputsSecret or delete it", run.Namespace, secret.Name)
		}
		existing.Data = data
		_, err = secrets.Update(ctx, existing, metav1.UpdateOptions{})
		return err
	}
}
