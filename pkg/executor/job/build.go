package job

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/executor"
	"github.com/terrarun/terrarun/pkg/stage"
)

// BuildJob returns the Job of one stage execution and the Secret it mounts,
// both in the run's namespace and controlled by the run. It does not talk to
// any server. See the package documentation for what the Job holds.
func BuildJob(ex executor.Execution, opts JobOptions) (*batchv1.Job, *corev1.Secret, error) {
	opts = opts.withDefaults()
	run := ex.Run
	if run == nil {
		return nil, nil, fmt.Errorf("no run")
	}
	if run.Name == "" || run.Namespace == "" || run.UID == "" {
		return nil, nil, fmt.Errorf("run %s/%s has no name, namespace or UID", run.Namespace, run.Name)
	}
	if ex.Stage != v1alpha1.StagePlan && ex.Stage != v1alpha1.StageApply {
		return nil, nil, fmt.Errorf("run %s/%s: unknown stage %q", run.Namespace, run.Name, ex.Stage)
	}
	if ex.Attempt < 1 {
		return nil, nil, fmt.Errorf("run %s/%s: stage %s: attempt %d is not positive", run.Namespace, run.Name, ex.Stage, ex.Attempt)
	}
	if opts.ServerURL == "" {
		return nil, nil, fmt.Errorf("kubernetes executor: no server URL")
	}
	spec := &run.Spec
	image := spec.Engine.Image
	if image == "" {
		image = opts.Image
	}
	if image == "" {
		return nil, nil, fmt.Errorf("run %s/%s has no spec.engine.image, and the executor has no default image", run.Namespace, run.Name)
	}
	if d := spec.Engine.ImageDigest; d != "" && !strings.Contains(image, "@") {
		// What the cluster policy verified is what runs.
		image += "@" + d
	}

	name := JobName(run.Name, ex.Stage, ex.Attempt)
	secretName := stageSecretName(name)
	labels := Labels(run, ex.Stage, ex.Attempt)
	annotations := map[string]string{AnnotationRunName: run.Name}
	owner := ownerReference(run)

	b := &podBuilder{
		secret: &corev1.Secret{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{
				Name:            secretName,
				Namespace:       run.Namespace,
				Labels:          maps.Clone(labels),
				Annotations:     maps.Clone(annotations),
				OwnerReferences: []metav1.OwnerReference{owner},
			},
			Type:      corev1.SecretTypeOpaque,
			Immutable: ptr.To(true),
			Data:      map[string][]byte{},
		},
	}
	st := executor.StageSpec(ex)
	if ex.Stage == v1alpha1.StagePlan {
		// Each pod's host name is its Job's name (below), or what
		// JobOptions.HostName makes of it, which a state lock's "Who"
		// records.
		for a := int32(1); a < ex.Attempt; a++ {
			st.LostPlanHosts = append(st.LostPlanHosts, opts.HostName(JobName(run.Name, v1alpha1.StagePlan, a)))
		}
	}
	st.Server = opts.ServerURL
	st.TokenFile = TokenFile
	st.WorkDir = WorkDir
	if len(opts.CABundle) > 0 {
		st.CAFile = CAFile
		b.secret.Data[CAKey] = opts.CABundle
		b.bind(CAFile, opts.CABundle)
	}

	// The stage Secret: stage.json, ca.crt and the stage's key. Inline
	// sources add items below.
	stageItems := []corev1.KeyToPath{{Key: StageKey, Path: StageKey}}
	if len(opts.CABundle) > 0 {
		stageItems = append(stageItems, corev1.KeyToPath{Key: CAKey, Path: CAKey})
	}
	if opts.StageKeys != nil {
		key := []byte(opts.StageKeys.For(executor.Identity{Namespace: run.Namespace, Name: run.Name, UID: string(run.UID), Stage: ex.Stage, Attempt: ex.Attempt}))
		st.StageKeyFile = StageKeyFile
		b.secret.Data[StageKeyKey] = key
		b.bind(StageKeyFile, key)
		stageItems = append(stageItems, corev1.KeyToPath{Key: StageKeyKey, Path: StageKeyKey})
	}
	b.addVolume(corev1.Volume{Name: volumeStage, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: secretName, Items: stageItems, DefaultMode: ptr.To(readable),
	}}}, StageDir)

	// The only credential towards terrarun-apiserver: a pod-bound token with
	// terrarun's audience, useless against kube-apiserver.
	b.addVolume(corev1.Volume{Name: volumeToken, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
			Audience:          opts.Audience,
			ExpirationSeconds: ptr.To(seconds(opts.TokenExpiration)),
			Path:              "token",
		}}},
	}}}, TokenDir)

	// The source is fetched by the plan stage only: the apply stage downloads
	// the planned configuration from the server.
	if ex.Stage == v1alpha1.StagePlan {
		if err := b.addSource(run, &st.Source); err != nil {
			return nil, nil, fmt.Errorf("run %s/%s: %w", run.Namespace, run.Name, err)
		}
	}
	st.Registry = b.addRegistryAccess(spec.Source)
	vars, err := executor.Variables(ex)
	if err != nil {
		return nil, nil, err
	}
	b.addVariables(vars, inputsSecretName(name), &st)
	b.addBackend(run, &st.Backend)
	// A Kubernetes API token reaches the run's code only for a ServiceAccount
	// the run names (admission checks that its creator may use it, and
	// refuses in_cluster_config without one).
	if st.Backend.Type == "kubernetes" && st.Backend.Config["in_cluster_config"] == "true" && spec.Executor != nil && spec.Executor.ServiceAccountName != "" {
		b.addKubeAPIAccess(opts)
	}

	if claim := pluginCacheClaim(run, opts.PluginCache); claim != nil {
		b.addVolume(corev1.Volume{Name: volumePluginCache, VolumeSource: pluginCacheVolume(claim.Name)}, pluginCacheDir)
		st.PluginCacheDir = pluginCacheDir
	}

	st.Bound = slices.Sorted(maps.Keys(b.bound))
	stageJSON, err := json.Marshal(st)
	if err != nil {
		return nil, nil, fmt.Errorf("run %s/%s: encoding the stage: %w", run.Namespace, run.Name, err)
	}
	b.secret.Data[StageKey] = stageJSON
	// What the executor checks before it uses anything: the stage's Secrets
	// may be replaced under their names before the kubelet mounts them, the
	// pod template may not. Unknown (bindingUnknown) when the other runs'
	// outputs that the stage reads are not at hand: Status rebuilds the Job
	// to compare it with the one Start created, and checkJob takes its value.
	binding := bindingUnknown
	if !b.unknownInputs {
		binding = stage.BindingDigest(stageJSON, b.bound)
	}

	b.addVolume(corev1.Volume{Name: volumeWork, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}, WorkDir)
	b.addVolume(corev1.Volume{Name: volumeTmp, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}, TmpDir)

	var (
		serviceAccount = opts.ServiceAccountName
		nodeSelector   map[string]string
		tolerations    []corev1.Toleration
		resources      corev1.ResourceRequirements
	)
	if x := spec.Executor; x != nil {
		if x.ServiceAccountName != "" {
			serviceAccount = x.ServiceAccountName
		}
		nodeSelector = maps.Clone(x.NodeSelector)
		for i := range x.Tolerations {
			tolerations = append(tolerations, *x.Tolerations[i].DeepCopy())
		}
		resources = *x.Resources.DeepCopy()
	}
	if err := defaultResources(&resources); err != nil {
		return nil, nil, err
	}

	timeout := executor.ExecutionTimeout(run, ex.Stage)

	podAnnotations := maps.Clone(annotations)
	podAnnotations[defaultContainerAnnotationKey] = ContainerName
	job := &batchv1.Job{
		TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{
			Name:            name,
			Namespace:       run.Namespace,
			Labels:          maps.Clone(labels),
			Annotations:     maps.Clone(annotations),
			OwnerReferences: []metav1.OwnerReference{owner},
		},
		Spec: batchv1.JobSpec{
			// One pod, never retried: a retry is a new attempt, decided by the
			// controller, with a new Job.
			Parallelism:             ptr.To[int32](1),
			Completions:             ptr.To[int32](1),
			BackoffLimit:            ptr.To[int32](0),
			ActiveDeadlineSeconds:   ptr.To(seconds(timeout)),
			TTLSecondsAfterFinished: ptr.To(int32(seconds(opts.TTLAfterFinished))),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      maps.Clone(labels),
					Annotations: podAnnotations,
				},
				Spec: corev1.PodSpec{
					// A host name that names the execution: engines record it
					// in the state locks they take.
					Hostname:                      opts.HostName(name),
					RestartPolicy:                 corev1.RestartPolicyNever,
					ServiceAccountName:            serviceAccount,
					AutomountServiceAccountToken:  ptr.To(false),
					EnableServiceLinks:            ptr.To(false),
					TerminationGracePeriodSeconds: ptr.To(seconds(opts.GracePeriod)),
					NodeSelector:                  nodeSelector,
					Tolerations:                   tolerations,
					TopologySpreadConstraints:     spread(opts.SpreadTopologyKey),
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						RunAsUser:      ptr.To(nonRootID),
						RunAsGroup:     ptr.To(nonRootID),
						FSGroup:        ptr.To(nonRootID),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{{
						Name:    ContainerName,
						Image:   image,
						Command: []string{"terrarun-executor", "--stage-file", StageFile},
						// Never a Secret value here: secrets are files.
						Env: []corev1.EnvVar{
							{Name: "HOME", Value: WorkDir},
							{Name: "TMPDIR", Value: TmpDir},
							{Name: stage.BindingEnv, Value: binding},
						},
						WorkingDir:   WorkDir,
						Resources:    resources,
						VolumeMounts: b.mounts,
						// Not FallbackToLogsOnError: a log tail would carry terraform
						// output into the pod's status and the run's message.
						// terrarun-executor may write a short, redacted reason to
						// /dev/termination-log.
						TerminationMessagePolicy: corev1.TerminationMessageReadFile,
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false),
							ReadOnlyRootFilesystem:   ptr.To(true),
							RunAsNonRoot:             ptr.To(true),
							Privileged:               ptr.To(false),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
					Volumes: b.volumes,
				},
			},
		},
	}
	return job, b.secret, nil
}

// spread is the soft topology spread constraint over key of a namespace's
// executor pods (those with a run UID label), or none when key is empty.
func spread(key string) []corev1.TopologySpreadConstraint {
	if key == "" {
		return nil
	}
	return []corev1.TopologySpreadConstraint{{
		MaxSkew:           1,
		TopologyKey:       key,
		WhenUnsatisfiable: corev1.ScheduleAnyway,
		LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: LabelRunUID, Operator: metav1.LabelSelectorOpExists},
		}},
	}}
}

// Labels returns the labels of the Job, pods and Secret of one stage execution.
func Labels(run *v1alpha1.TerraformRun, stageName v1alpha1.StageName, attempt int32) map[string]string {
	return map[string]string{
		LabelRun:     runLabelValue(run.Name),
		LabelRunUID:  string(run.UID),
		LabelStage:   string(stageName),
		LabelAttempt: strconv.FormatInt(int64(attempt), 10),
	}
}

// ownerReference makes the run the controller of a Job or Secret, so that the
// host's garbage collector deletes them with the run.
//
// BlockOwnerDeletion is false on purpose: the run is served by the aggregated
// terrarun-apiserver, not by kube-apiserver. Setting it would make the
// OwnerReferencesPermissionEnforcement admission plugin require "update" on
// terraformruns/finalizers, checked against an API kube-apiserver does not
// serve, and would tie a foreground deletion of the run (in terrarun's etcd)
// to the host garbage collector deleting Jobs; with it false, deleting a run
// never waits on the host cluster, and the collector still removes the Jobs
// and Secrets in the background.
func ownerReference(run *v1alpha1.TerraformRun) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion:         v1alpha1.SchemeGroupVersion.String(),
		Kind:               "TerraformRun",
		Name:               run.Name,
		UID:                run.UID,
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(false),
	}
}

// podBuilder collects the stage Secret's data and the pod's volumes and mounts.
type podBuilder struct {
	secret  *corev1.Secret
	volumes []corev1.Volume
	mounts  []corev1.VolumeMount
	// bound maps the path of every file that terrarun writes for the stage
	// into its own Secrets to its content (stage.Spec.Bound).
	bound map[string][]byte
	// unknownInputs is set when the stage reads other runs' outputs that the
	// Execution does not hold.
	unknownInputs bool
}

// bindingUnknown is the value of stage.BindingEnv in a Job rebuilt without
// the other runs' outputs its stage reads.
const bindingUnknown = "unknown"

func (b *podBuilder) bind(path string, content []byte) {
	if b.bound == nil {
		b.bound = map[string][]byte{}
	}
	b.bound[path] = content
}

func (b *podBuilder) addVolume(v corev1.Volume, mountPath string) {
	b.volumes = append(b.volumes, v)
	readOnly := v.EmptyDir == nil && v.PersistentVolumeClaim == nil
	b.mounts = append(b.mounts, corev1.VolumeMount{Name: v.Name, MountPath: mountPath, ReadOnly: readOnly})
}

// addSource mounts the configuration at SourceDir (inline and ConfigMap),
// the git credentials at GitCredentialsDir, or the keys of an OCI source's
// Secrets below OCIDir.
func (b *podBuilder) addSource(run *v1alpha1.TerraformRun, out *stage.Source) error {
	src := run.Spec.Source
	switch {
	case len(src.Inline) > 0:
		// Inline files travel in the stage Secret as src-<file>, mounted back
		// under their own names.
		var items []corev1.KeyToPath
		for _, file := range sortedKeys(src.Inline) {
			key := SourceKeyPrefix + file
			if len(validation.IsConfigMapKey(key)) != 0 {
				// A file name too long for the prefix: key it by its hash.
				sum := sha256.Sum256([]byte(file))
				key = SourceKeyPrefix + hex.EncodeToString(sum[:16])
			}
			if _, dup := b.secret.Data[key]; dup {
				return fmt.Errorf("inline file %q: duplicate key %q", file, key)
			}
			b.secret.Data[key] = []byte(src.Inline[file])
			b.bind(SourceDir+"/"+file, []byte(src.Inline[file]))
			items = append(items, corev1.KeyToPath{Key: key, Path: file})
		}
		b.addVolume(corev1.Volume{Name: volumeSource, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: b.secret.Name, Items: items, DefaultMode: ptr.To(readable),
		}}}, SourceDir)
		out.Dir = SourceDir
	case src.ConfigMap != nil:
		b.addVolume(corev1.Volume{Name: volumeSource, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: src.ConfigMap.Name},
			DefaultMode:          ptr.To(readable),
		}}}, SourceDir)
		out.Dir = SourceDir
	case src.Git != nil:
		out.Git = &stage.GitSource{URL: src.Git.URL, Ref: src.Git.Ref, Path: src.Git.Path}
		if src.Git.CredentialsSecret != "" {
			b.addVolume(corev1.Volume{Name: volumeGit, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: src.Git.CredentialsSecret, DefaultMode: ptr.To(readable),
			}}}, GitCredentialsDir)
			out.Git.CredentialsDir = GitCredentialsDir
		}
	case src.OCI != nil:
		o := src.OCI
		out.OCI = &stage.OCISource{URL: o.URL, Path: o.Path, Insecure: o.Insecure}
		if r := o.Ref; r != nil {
			out.OCI.Tag, out.OCI.Semver, out.OCI.Digest = r.Tag, r.Semver, r.Digest
		}
		if v := o.Verify; v != nil {
			out.OCI.KeysFile = b.mountKey(volumeOCIKeys, v.KeysSecret, v1alpha1.OCICosignKeysKey)
			out.OCI.KeysSecret = v.KeysSecret
			out.OCI.TrustedKeys = v.TrustedKeys
			out.OCI.TrustedRootFile = b.mountKey(volumeOCITrustedRoot, v.TrustedRootSecret, v1alpha1.OCITrustedRootKey)
			out.OCI.TrustedRootSecret = v.TrustedRootSecret
			out.OCI.Identities = stage.Identities(v.MatchOIDCIdentity)
		}
	case src.SourceRef != nil:
		a, err := executor.PinnedArtifact(run)
		if err != nil {
			return err
		}
		out.Artifact = a
	default:
		return fmt.Errorf("spec.source has neither inline, configMap, git, oci nor sourceRef")
	}
	return nil
}

// mountKey mounts one key of Secret secret as a file of its own below
// OCIDir, and returns its path; "" when secret is "".
func (b *podBuilder) mountKey(volume, secret, key string) string {
	if secret == "" {
		return ""
	}
	b.addVolume(corev1.Volume{Name: volume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: secret, DefaultMode: ptr.To(readable), Items: []corev1.KeyToPath{{Key: key, Path: key}},
	}}}, OCIDir+"/"+volume)
	return OCIDir + "/" + volume + "/" + key
}

// addRegistryAccess mounts, in both stages, the credentials and CA of the
// registry of an OCI source.
func (b *podBuilder) addRegistryAccess(src v1alpha1.Source) *stage.RegistryAccess {
	o := src.OCI
	if o == nil || o.CredentialsSecret == "" && o.CertSecret == "" {
		return nil
	}
	return &stage.RegistryAccess{
		CredentialsFile: b.mountKey(volumeOCICredentials, o.CredentialsSecret, corev1.DockerConfigJsonKey),
		CAFile:          b.mountKey(volumeOCICA, o.CertSecret, v1alpha1.OCICAKey),
	}
}

// addVariables lists the variables in the stage (executor.Variables), and
// mounts every variable read from a Secret or ConfigMap as a file: one
// volume per Secret or ConfigMap, at VariablesDir/<volume>, one item per
// variable, named after it. A variable read from another run's output is a
// key of the Secret inputs in the plan stage, which Start writes with its
// value (inputsSecret); the apply stage needs only its name.
func (b *podBuilder) addVariables(vars []executor.Variable, inputs string, st *stage.Spec) {
	type source struct {
		secret bool
		name   string
	}
	volumeOf := map[source]int{} // index into b.volumes
	for _, v := range vars {
		out := v.Variable
		var (
			src source
			key string
		)
		switch {
		case v.SecretKeyRef != nil:
			src, key = source{secret: true, name: v.SecretKeyRef.Name}, v.SecretKeyRef.Key
		case v.ConfigMapKeyRef != nil:
			src, key = source{name: v.ConfigMapKeyRef.Name}, v.ConfigMapKeyRef.Key
		case v.NeedsInput:
			src, key = source{secret: true, name: inputs}, v.Name
		default:
			st.Variables = append(st.Variables, out)
			continue
		}
		i, ok := volumeOf[src]
		if !ok {
			i = len(b.volumes)
			volumeOf[src] = i
			var vs corev1.VolumeSource
			name := fmt.Sprintf("var-configmap-%d", len(volumeOf)-1)
			if src.secret {
				name = fmt.Sprintf("var-secret-%d", len(volumeOf)-1)
				vs.Secret = &corev1.SecretVolumeSource{SecretName: src.name, DefaultMode: ptr.To(readable)}
			} else {
				vs.ConfigMap = &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: src.name}, DefaultMode: ptr.To(readable)}
			}
			b.addVolume(corev1.Volume{Name: name, VolumeSource: vs}, VariablesDir+"/"+name)
		}
		vol := &b.volumes[i]
		item := corev1.KeyToPath{Key: key, Path: v.Name}
		if vol.Secret != nil {
			vol.Secret.Items = append(vol.Secret.Items, item)
		} else {
			vol.ConfigMap.Items = append(vol.ConfigMap.Items, item)
		}
		out.File = VariablesDir + "/" + vol.Name + "/" + v.Name
		if v.NeedsInput {
			// The stage binds the inputs it reads; when the Execution does
			// not hold them (Status rebuilds the Job), their binding is
			// unknown.
			if v.Input != nil {
				b.bind(out.File, v.Input)
			} else {
				b.unknownInputs = true
			}
		}
		st.Variables = append(st.Variables, out)
	}
}

// addBackend fills in the run's backend, or the default: the state terrarun
// serves (stage.ServedBackend), which needs no Kubernetes credential.
func (b *podBuilder) addBackend(run *v1alpha1.TerraformRun, out *stage.Backend) {
	be := run.Spec.Backend
	if be == nil || be.Type == "" {
		*out = stage.Backend{Type: stage.ServedBackend}
		return
	}
	*out = stage.Backend{Type: be.Type, Config: maps.Clone(be.Config)}
	if be.ConfigSecret != "" {
		b.addVolume(corev1.Volume{Name: volumeBackend, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName:  be.ConfigSecret,
			Items:       []corev1.KeyToPath{{Key: BackendConfigKey, Path: BackendConfigKey}},
			DefaultMode: ptr.To(readable),
		}}}, BackendDir)
		out.ConfigFile = BackendConfigFile
	}
}

// addKubeAPIAccess mounts, at the path client-go's in-cluster configuration
// reads, what automountServiceAccountToken would: a token for kube-apiserver
// (default audience, expiring), the cluster CA and the namespace. Only the
// in-cluster kubernetes backend of a run that names its ServiceAccount gets
// it.
func (b *podBuilder) addKubeAPIAccess(opts JobOptions) {
	b.addVolume(corev1.Volume{Name: volumeKubeAPIAccess, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
				ExpirationSeconds: ptr.To(seconds(opts.TokenExpiration)),
				Path:              "token",
			}},
			{ConfigMap: &corev1.ConfigMapProjection{
				LocalObjectReference: corev1.LocalObjectReference{Name: kubeRootCAConfigMap},
				Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
			}},
			{DownwardAPI: &corev1.DownwardAPIProjection{
				Items: []corev1.DownwardAPIVolumeFile{{
					Path:     "namespace",
					FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"},
				}},
			}},
		},
	}}}, KubeAPIAccessDir)
}

// defaultResources fills in requests (cpu 100m, memory 256Mi) and a memory
// limit (1Gi) that the run leaves unset, unless that would put a request
// above a limit.
func defaultResources(r *corev1.ResourceRequirements) error {
	set := func(list *corev1.ResourceList, name corev1.ResourceName, value string, ok func(resource.Quantity) bool) {
		if _, exists := (*list)[name]; exists {
			return
		}
		q := resource.MustParse(value)
		if !ok(q) {
			return
		}
		if *list == nil {
			*list = corev1.ResourceList{}
		}
		(*list)[name] = q
	}
	belowLimit := func(name corev1.ResourceName) func(resource.Quantity) bool {
		return func(q resource.Quantity) bool {
			limit, exists := r.Limits[name]
			return !exists || q.Cmp(limit) <= 0
		}
	}
	aboveRequest := func(name corev1.ResourceName) func(resource.Quantity) bool {
		return func(q resource.Quantity) bool {
			request, exists := r.Requests[name]
			return !exists || q.Cmp(request) >= 0
		}
	}
	set(&r.Requests, corev1.ResourceCPU, defaultRequestCPU, belowLimit(corev1.ResourceCPU))
	set(&r.Requests, corev1.ResourceMemory, defaultRequestMemory, belowLimit(corev1.ResourceMemory))
	set(&r.Limits, corev1.ResourceMemory, defaultLimitMemory, aboveRequest(corev1.ResourceMemory))
	for name, request := range r.Requests {
		if limit, ok := r.Limits[name]; ok && request.Cmp(limit) > 0 {
			return fmt.Errorf("spec.executor.resources: %s request %s is above its limit %s", name, request.String(), limit.String())
		}
	}
	return nil
}

// seconds rounds d up to whole seconds, at least 1.
func seconds(d time.Duration) int64 {
	s := int64(math.Ceil(d.Seconds()))
	if s < 1 {
		s = 1
	}
	return s
}

func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}

// inputsSecret is the Secret of a plan stage's inputs (Execution.Inputs),
// beside its stage Secret and like it; nil when the stage reads no run
// output. Every such variable must have its value.
func inputsSecret(ex executor.Execution, stageSecret *corev1.Secret) (*corev1.Secret, error) {
	vars, err := executor.Variables(ex)
	if err != nil {
		return nil, err
	}
	data := map[string][]byte{}
	for _, v := range vars {
		if !v.NeedsInput {
			continue
		}
		if err := v.CheckInput(ex.Run); err != nil {
			return nil, err
		}
		data[v.Name] = v.Input
	}
	if len(data) == 0 {
		return nil, nil
	}
	s := stageSecret.DeepCopy()
	s.Name = inputsSecretName(JobName(ex.Run.Name, ex.Stage, ex.Attempt))
	s.Data = data
	return s, nil
}
