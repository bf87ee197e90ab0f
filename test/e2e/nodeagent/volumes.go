package nodeagent

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Defaults of the API for volume file modes and token lifetimes.
const (
	defaultFileMode        int32 = 0o644
	defaultTokenExpiration int64 = 3600
	// tokenRefreshFraction of a projected token's lifetime passes before it is
	// requested again, as the kubelet does.
	tokenRefreshFraction = 0.8
)

// payloadFile is one file of an atomically written volume.
type payloadFile struct {
	data []byte
	mode int32
}

// volumeDir is where a pod volume lives on the node.
func (r *podRunner) volumeDir(name string) string {
	return filepath.Join(r.dir, "volumes", name)
}

// materializeVolume creates or rewrites volume v under the pod directory. For
// projected volumes with service-account tokens, refreshAt is when the
// soonest-expiring token should be requested again; it is zero otherwise.
func (r *podRunner) materializeVolume(ctx context.Context, v *corev1.Volume) (refreshAt time.Time, err error) {
	dir := r.volumeDir(v.Name)
	fsGroup := r.fsGroup()
	switch {
	case v.EmptyDir != nil:
		// Medium Memory is an ordinary directory too.
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return time.Time{}, err
		}
		mode := os.FileMode(0o777)
		if fsGroup != nil {
			if err := os.Lchown(dir, -1, int(*fsGroup)); err != nil {
				return time.Time{}, err
			}
			mode |= os.ModeSetgid
		}
		return time.Time{}, os.Chmod(dir, mode)
	case v.HostPath != nil:
		// Mounted straight from the node; DirectoryOrCreate is the only type
		// that changes anything.
		if v.HostPath.Type != nil && *v.HostPath.Type == corev1.HostPathDirectoryOrCreate {
			return time.Time{}, os.MkdirAll(v.HostPath.Path, 0o755)
		}
		return time.Time{}, nil
	case v.PersistentVolumeClaim != nil:
		path, err := r.claimDir(ctx, v.PersistentVolumeClaim.ClaimName)
		if err != nil {
			return time.Time{}, err
		}
		if r.claimDirs == nil {
			r.claimDirs = map[string]string{}
		}
		r.claimDirs[v.Name] = path
		return time.Time{}, nil
	case v.Secret != nil:
		files, err := r.secretPayload(ctx, v.Secret.SecretName, v.Secret.Items, v.Secret.DefaultMode, v.Secret.Optional)
		if err != nil {
			return time.Time{}, err
		}
		return time.Time{}, writeAtomic(dir, files, fsGroup)
	case v.ConfigMap != nil:
		files, err := r.configMapPayload(ctx, v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.DefaultMode, v.ConfigMap.Optional)
		if err != nil {
			return time.Time{}, err
		}
		return time.Time{}, writeAtomic(dir, files, fsGroup)
	case v.DownwardAPI != nil:
		files := map[string]payloadFile{}
		for _, item := range v.DownwardAPI.Items {
			data, err := r.downwardField(item)
			if err != nil {
				return time.Time{}, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			files[item.Path] = payloadFile{data: data, mode: modeOf(item.Mode, v.DownwardAPI.DefaultMode)}
		}
		return time.Time{}, writeAtomic(dir, files, fsGroup)
	case v.Projected != nil:
		files := map[string]payloadFile{}
		for i, src := range v.Projected.Sources {
			var add map[string]payloadFile
			switch {
			case src.ServiceAccountToken != nil:
				p := src.ServiceAccountToken
				token, expires, err := r.requestToken(ctx, p)
				if err != nil {
					return time.Time{}, fmt.Errorf("volume %s: %w", v.Name, err)
				}
				lifetime := time.Until(expires)
				at := time.Now().Add(time.Duration(float64(lifetime) * tokenRefreshFraction))
				if refreshAt.IsZero() || at.Before(refreshAt) {
					refreshAt = at
				}
				add = map[string]payloadFile{p.Path: {data: []byte(token), mode: modeOf(nil, v.Projected.DefaultMode)}}
			case src.Secret != nil:
				add, err = r.secretPayload(ctx, src.Secret.Name, src.Secret.Items, v.Projected.DefaultMode, src.Secret.Optional)
			case src.ConfigMap != nil:
				add, err = r.configMapPayload(ctx, src.ConfigMap.Name, src.ConfigMap.Items, v.Projected.DefaultMode, src.ConfigMap.Optional)
			case src.DownwardAPI != nil:
				add = map[string]payloadFile{}
				for _, item := range src.DownwardAPI.Items {
					data, ferr := r.downwardField(item)
					if ferr != nil {
						return time.Time{}, fmt.Errorf("volume %s: %w", v.Name, ferr)
					}
					add[item.Path] = payloadFile{data: data, mode: modeOf(item.Mode, v.Projected.DefaultMode)}
				}
			default:
				return time.Time{}, fmt.Errorf("volume %s: projected source %d is not supported by the test node agent (only serviceAccountToken, secret, configMap and downwardAPI are)", v.Name, i)
			}
			if err != nil {
				return time.Time{}, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			maps.Copy(files, add)
		}
		return refreshAt, writeAtomic(dir, files, fsGroup)
	default:
		return time.Time{}, fmt.Errorf("volume %s: %s", v.Name, unsupportedVolume(v))
	}
}

// volumeSourceDir is the node path a volume mount binds (before subPath).
func (r *podRunner) volumeSourceDir(v *corev1.Volume) string {
	switch {
	case v.HostPath != nil:
		return v.HostPath.Path
	case v.PersistentVolumeClaim != nil:
		return r.claimDirs[v.Name]
	}
	return r.volumeDir(v.Name)
}

// claimDir is the node path of the volume bound to the pod's claim name: a
// hostPath or local PersistentVolume. Until the claim is bound the pod
// waits, as it does for a missing Secret. Like the kubelet for these volume
// types, the agent changes no ownership (fsGroup does not apply).
func (r *podRunner) claimDir(ctx context.Context, name string) (string, error) {
	pvc, err := r.a.client.CoreV1().PersistentVolumeClaims(r.pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("persistentvolumeclaim %s: %w", name, err)
	}
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName == "" {
		return "", fmt.Errorf("persistentvolumeclaim %s is not bound (phase %q)", name, pvc.Status.Phase)
	}
	pv, err := r.a.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("persistentvolumeclaim %s: volume %s: %w", name, pvc.Spec.VolumeName, err)
	}
	if ref := pv.Spec.ClaimRef; ref == nil || ref.UID != pvc.UID {
		return "", fmt.Errorf("persistentvolumeclaim %s: volume %s is not bound to it", name, pv.Name)
	}
	switch {
	case pv.Spec.HostPath != nil:
		return pv.Spec.HostPath.Path, nil
	case pv.Spec.Local != nil:
		return pv.Spec.Local.Path, nil
	}
	return "", fmt.Errorf("persistentvolumeclaim %s: volume %s is neither hostPath nor local, the only persistent volumes the test node agent mounts", name, pv.Name)
}

func modeOf(item, def *int32) int32 {
	switch {
	case item != nil:
		return *item
	case def != nil:
		return *def
	}
	return defaultFileMode
}

// secretPayload returns the files of a secret volume or projection: the
// items, or every key. A missing Secret or key is an error unless optional.
func (r *podRunner) secretPayload(ctx context.Context, name string, items []corev1.KeyToPath, defaultMode *int32, optional *bool) (map[string]payloadFile, error) {
	s, err := r.a.client.CoreV1().Secrets(r.pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && optional != nil && *optional {
		return map[string]payloadFile{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", name, err)
	}
	data := map[string][]byte{}
	maps.Copy(data, s.Data)
	for k, v := range s.StringData {
		data[k] = []byte(v)
	}
	return keyPayload("secret", name, data, items, defaultMode, optional)
}

func (r *podRunner) configMapPayload(ctx context.Context, name string, items []corev1.KeyToPath, defaultMode *int32, optional *bool) (map[string]payloadFile, error) {
	cm, err := r.a.client.CoreV1().ConfigMaps(r.pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && optional != nil && *optional {
		return map[string]payloadFile{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("configmap %s: %w", name, err)
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	maps.Copy(data, cm.BinaryData)
	return keyPayload("configmap", name, data, items, defaultMode, optional)
}

func keyPayload(kind, name string, data map[string][]byte, items []corev1.KeyToPath, defaultMode *int32, optional *bool) (map[string]payloadFile, error) {
	files := map[string]payloadFile{}
	if len(items) == 0 {
		for k, v := range data {
			files[k] = payloadFile{data: v, mode: modeOf(nil, defaultMode)}
		}
		return files, nil
	}
	for _, item := range items {
		v, ok := data[item.Key]
		if !ok {
			if optional != nil && *optional {
				continue
			}
			return nil, fmt.Errorf("%s %s has no key %q", kind, name, item.Key)
		}
		files[item.Path] = payloadFile{data: v, mode: modeOf(item.Mode, defaultMode)}
	}
	return files, nil
}

// downwardField is the content of a downward API volume file.
func (r *podRunner) downwardField(item corev1.DownwardAPIVolumeFile) ([]byte, error) {
	if item.FieldRef == nil {
		return nil, fmt.Errorf("downwardAPI item %s: only fieldRef is supported by the test node agent", item.Path)
	}
	labels, annotations := r.metadata()
	switch path := item.FieldRef.FieldPath; path {
	case "metadata.labels":
		return formatMap(labels), nil
	case "metadata.annotations":
		return formatMap(annotations), nil
	default:
		v, err := r.fieldValue(path)
		return []byte(v), err
	}
}

// formatMap formats labels or annotations as the kubelet does: key="value"
// lines, sorted by key.
func formatMap(m map[string]string) []byte {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(&b, "%s=%s\n", k, strconv.Quote(m[k]))
	}
	return []byte(strings.TrimSuffix(b.String(), "\n"))
}

// fieldValue resolves a fieldRef of an env var or a downward API file.
func (r *podRunner) fieldValue(path string) (string, error) {
	pod := r.pod
	labels, annotations := r.metadata()
	if k, ok := subscript(path, "metadata.labels"); ok {
		return labels[k], nil
	}
	if k, ok := subscript(path, "metadata.annotations"); ok {
		return annotations[k], nil
	}
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return r.a.o.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP", "status.podIPs", "status.hostIP", "status.hostIPs":
		return r.a.o.Address, nil
	}
	return "", fmt.Errorf("fieldRef %q is not supported by the test node agent", path)
}

// subscript parses prefix['key'].
func subscript(path, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(path, prefix+"['")
	if !ok || !strings.HasSuffix(rest, "']") {
		return "", false
	}
	return strings.TrimSuffix(rest, "']"), true
}

// requestToken asks for a token bound to the pod, with the projection's
// audience and lifetime, for the pod's service account. It returns the token
// and when it expires.
func (r *podRunner) requestToken(ctx context.Context, p *corev1.ServiceAccountTokenProjection) (string, time.Time, error) {
	sa := r.pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	exp := defaultTokenExpiration
	if p.ExpirationSeconds != nil {
		exp = *p.ExpirationSeconds
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: &exp,
		BoundObjectRef: &authenticationv1.BoundObjectReference{
			Kind:       "Pod",
			APIVersion: "v1",
			Name:       r.pod.Name,
			UID:        r.pod.UID,
		},
	}}
	if p.Audience != "" {
		tr.Spec.Audiences = []string{p.Audience}
	}
	requested := time.Now()
	out, err := r.a.client.CoreV1().ServiceAccounts(r.pod.Namespace).CreateToken(ctx, sa, tr, metav1.CreateOptions{})
	if err != nil {
		return "", time.Time{}, fmt.Errorf("requesting a token for service account %s: %w", sa, err)
	}
	if out.Status.Token == "" {
		return "", time.Time{}, fmt.Errorf("requesting a token for service account %s: the response has no token", sa)
	}
	expires := out.Status.ExpirationTimestamp.Time
	if expires.IsZero() {
		expires = requested.Add(time.Duration(exp) * time.Second)
	}
	return out.Status.Token, expires, nil
}

// writeAtomic makes dir hold exactly files, the way the kubelet's atomic
// writer does: the files live in a fresh timestamped directory, ..data is a
// symbolic link to it, swapped by rename, and each top-level name is a
// symbolic link into ..data. Readers never see a partial update. With fsGroup,
// everything gets that group, and files are group-readable.
func writeAtomic(dir string, files map[string]payloadFile, fsGroup *int64) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	chgrp := func(path string) error {
		if fsGroup == nil {
			return nil
		}
		return os.Lchown(path, -1, int(*fsGroup))
	}
	if err := chgrp(dir); err != nil {
		return err
	}
	ts, err := os.MkdirTemp(dir, ".."+time.Now().UTC().Format("2006_01_02_15_04_05."))
	if err != nil {
		return err
	}
	if err := os.Chmod(ts, 0o755); err != nil {
		return err
	}
	if err := chgrp(ts); err != nil {
		return err
	}
	tops := map[string]bool{}
	for _, rel := range slices.Sorted(maps.Keys(files)) {
		f := files[rel]
		clean := filepath.Clean(rel)
		if rel == "" || filepath.IsAbs(rel) || strings.HasPrefix(clean, "..") {
			return fmt.Errorf("invalid volume file path %q", rel)
		}
		tops[strings.SplitN(clean, "/", 2)[0]] = true
		path := filepath.Join(ts, clean)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		for d := filepath.Dir(path); d != ts; d = filepath.Dir(d) {
			if err := chgrp(d); err != nil {
				return err
			}
		}
		if err := os.WriteFile(path, f.data, 0o600); err != nil {
			return err
		}
		mode := os.FileMode(f.mode) & os.ModePerm
		if fsGroup != nil {
			mode |= 0o440
		}
		if err := chgrp(path); err != nil {
			return err
		}
		if err := os.Chmod(path, mode); err != nil {
			return err
		}
	}
	tmpLink := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmpLink)
	if err := os.Symlink(filepath.Base(ts), tmpLink); err != nil {
		return err
	}
	if err := chgrp(tmpLink); err != nil {
		return err
	}
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	if err := os.Rename(tmpLink, filepath.Join(dir, "..data")); err != nil {
		return err
	}
	for top := range tops {
		link := filepath.Join(dir, top)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", top), link); err != nil {
			return err
		}
		if err := chgrp(link); err != nil {
			return err
		}
	}
	// Drop what the new payload no longer has, and the previous payload.
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, "..") || tops[name] {
			continue
		}
		if e.Type()&os.ModeSymlink != 0 {
			_ = os.Remove(filepath.Join(dir, name))
		}
	}
	if old != "" && old != filepath.Base(ts) {
		_ = os.RemoveAll(filepath.Join(dir, old))
	}
	return nil
}

// metadata is the pod's labels and annotations as last seen: unlike its
// spec, they may change while it runs.
func (r *podRunner) metadata() (labels, annotations map[string]string) {
	r.metaMu.Lock()
	defer r.metaMu.Unlock()
	if r.labels == nil && r.annotations == nil {
		return r.pod.Labels, r.pod.Annotations
	}
	return r.labels, r.annotations
}

// updateMetadata takes pod's labels and annotations and, once the volumes
// were made, writes again the downward API volumes (and the projected
// volumes of downward API, Secret and ConfigMap sources only) that show
// them, as the kubelet does: Tekton's entrypoint waits for an annotation to
// appear in such a file before it runs a step.
func (r *podRunner) updateMetadata(ctx context.Context, pod *corev1.Pod) {
	r.metaMu.Lock()
	labels, annotations := r.labels, r.annotations
	if labels == nil && annotations == nil {
		labels, annotations = r.pod.Labels, r.pod.Annotations
	}
	changed := !maps.Equal(labels, pod.Labels) || !maps.Equal(annotations, pod.Annotations)
	if changed {
		r.labels, r.annotations = maps.Clone(pod.Labels), maps.Clone(pod.Annotations)
	}
	r.metaMu.Unlock()
	r.mu.Lock()
	ready := r.ready
	r.mu.Unlock()
	if !changed || !ready {
		return
	}
	for i := range r.pod.Spec.Volumes {
		v := &r.pod.Spec.Volumes[i]
		if v.DownwardAPI == nil && (v.Projected == nil || hasToken(v.Projected) || !hasDownward(v.Projected)) {
			continue
		}
		if _, err := r.materializeVolume(ctx, v); err != nil {
			r.a.logf("nodeagent: pod %s: updating volume %s: %v", r.key, v.Name, err)
		}
	}
}

func hasDownward(p *corev1.ProjectedVolumeSource) bool {
	for _, s := range p.Sources {
		if s.DownwardAPI != nil {
			return true
		}
	}
	return false
}
