package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ValueSource resolves the Secret and ConfigMap keys that a run refers to.
//
// A missing Secret, ConfigMap or key should be reported with an error that
// matches ErrNotFound (errors.Is), for example a *NotFoundError.
type ValueSource interface {
	// SecretValue returns the value of key in the Secret name.
	SecretValue(ctx context.Context, namespace, name, key string) ([]byte, error)
	// ConfigMapValue returns the value of key in the ConfigMap name.
	ConfigMapValue(ctx context.Context, namespace, name, key string) ([]byte, error)
	// ConfigMapData returns every key of the ConfigMap name (for spec.source.configMap).
	ConfigMapData(ctx context.Context, namespace, name string) (map[string]string, error)
}

// ErrNotFound is matched by the errors of a ValueSource for an absent Secret,
// ConfigMap or key.
var ErrNotFound = errors.New("not found")

// NotFoundError reports an absent Secret, ConfigMap or key, and what to do
// about it.
type NotFoundError struct {
	// Kind is "secret" or "configmap".
	Kind string
	// Namespace and Name name the object.
	Namespace, Name string
	// Key is the missing key; empty when the whole object is missing.
	Key string
	// Hint says how to fix it.
	Hint string
}

// Error reads like `secret "db" key "password" not found: <hint>`.
func (e *NotFoundError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %q", e.Kind, e.Name)
	if e.Key != "" {
		fmt.Fprintf(&b, " key %q", e.Key)
	}
	b.WriteString(" not found")
	if e.Hint != "" {
		b.WriteString(": ")
		b.WriteString(e.Hint)
	}
	return b.String()
}

// Is makes errors.Is(err, ErrNotFound) true.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// maxValueBytes caps one value and one ConfigMap, as the Kubernetes API does.
const maxValueBytes = 1 << 20

// FileValues is the standalone ValueSource: Secrets and ConfigMaps are
// directories of files, one file per key:
//
//	<Root>/<namespace>/secrets/<name>/<key>
//	<Root>/<namespace>/configmaps/<name>/<key>
//
// Keep Root private (0700): it holds secrets.
type FileValues struct {
	Root string
}

var _ ValueSource = FileValues{}

// SecretPath is the file that holds key of the Secret name.
func (f FileValues) SecretPath(namespace, name, key string) string {
	return filepath.Join(f.Root, namespace, "secrets", name, key)
}

// ConfigMapPath is the file that holds key of the ConfigMap name.
func (f FileValues) ConfigMapPath(namespace, name, key string) string {
	return filepath.Join(f.Root, namespace, "configmaps", name, key)
}

// SecretValue implements ValueSource.
func (f FileValues) SecretValue(ctx context.Context, namespace, name, key string) ([]byte, error) {
	if err := checkRef("secret", namespace, name, key, true); err != nil {
		return nil, err
	}
	p := f.SecretPath(namespace, name, key)
	return readValue(p, &NotFoundError{Kind: "secret", Namespace: namespace, Name: name, Key: key,
		Hint: "in standalone mode create the file " + p})
}

// ConfigMapValue implements ValueSource.
func (f FileValues) ConfigMapValue(ctx context.Context, namespace, name, key string) ([]byte, error) {
	if err := checkRef("configmap", namespace, name, key, true); err != nil {
		return nil, err
	}
	p := f.ConfigMapPath(namespace, name, key)
	return readValue(p, &NotFoundError{Kind: "configmap", Namespace: namespace, Name: name, Key: key,
		Hint: "in standalone mode create the file " + p})
}

// ConfigMapData implements ValueSource: every regular file of the ConfigMap's
// directory is a key; names starting with "." are skipped.
func (f FileValues) ConfigMapData(ctx context.Context, namespace, name string) (map[string]string, error) {
	if err := checkRef("configmap", namespace, name, "", false); err != nil {
		return nil, err
	}
	dir := filepath.Join(f.Root, namespace, "configmaps", name)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, &NotFoundError{Kind: "configmap", Namespace: namespace, Name: name,
			Hint: "in standalone mode create the directory " + dir + " with one file per key"}
	}
	if err != nil {
		return nil, fmt.Errorf("reading configmap %q: %w", name, err)
	}
	data := map[string]string{}
	total := 0
	for _, ent := range entries {
		key := ent.Name()
		if strings.HasPrefix(key, ".") || len(validation.IsConfigMapKey(key)) > 0 {
			continue
		}
		fi, err := os.Stat(filepath.Join(dir, key)) // follows symlinks, as mounted volumes use them
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		v, err := readValue(filepath.Join(dir, key), nil)
		if err != nil {
			return nil, fmt.Errorf("configmap %q: %w", name, err)
		}
		total += len(v)
		if total > maxValueBytes {
			return nil, fmt.Errorf("configmap %q is larger than %d bytes", name, maxValueBytes)
		}
		data[key] = string(v)
	}
	return data, nil
}

func checkRef(kind, namespace, name, key string, withKey bool) error {
	if len(validation.IsDNS1123Label(namespace)) > 0 {
		return fmt.Errorf("invalid namespace %q", namespace)
	}
	if len(validation.IsDNS1123Subdomain(name)) > 0 {
		return fmt.Errorf("invalid %s name %q", kind, name)
	}
	if withKey {
		if errs := validation.IsConfigMapKey(key); len(errs) > 0 {
			return fmt.Errorf("invalid key %q of %s %q: %s", key, kind, name, strings.Join(errs, "; "))
		}
	}
	return nil
}

// readValue reads a value file; notFound (when not nil) is returned for an absent file.
func readValue(path string, notFound error) ([]byte, error) {
	fh, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) && notFound != nil {
		return nil, notFound
	}
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(fh, maxValueBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxValueBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxValueBytes)
	}
	return b, nil
}
