// Package job is the Kubernetes executor: it runs each stage
// execution (one attempt of the plan or apply stage of a TerraformRun) as one
// Job in the run's namespace of the host cluster, and maps the executor
// identity of a request back to that Job.
//
// # Names
//
// The Job of an execution is JobName(run, stage, attempt), <run>-<stage>-<attempt>,
// shortened with a hash of the run name when it would not be a DNS label. Its
// stage Secret is <job>-stage. Both being deterministic, two controllers
// starting the same execution race into AlreadyExists, and Executor.Start
// adopts the existing object when its terrarun.dev/run-uid label is the run's.
//
// # The Job
//
// BuildJob makes a Job and a Secret that are, in full:
//
//   - labeled terrarun.dev/run (the run name, see runLabelValue), terrarun.dev/run-uid,
//     terrarun.dev/stage and terrarun.dev/attempt, on the Job, its pods and the
//     Secret; annotated terrarun.dev/run-name with the full run name;
//   - controlled by the run (an ownerReference with blockOwnerDeletion false,
//     because the run lives in the aggregated API server), so the host's garbage
//     collector deletes them with the run;
//   - one pod, never retried: backoffLimit 0, restartPolicy Never;
//     activeDeadlineSeconds from spec.timeouts.plan or spec.timeouts.apply;
//     ttlSecondsAfterFinished from JobOptions (1h);
//   - resources from spec.executor.resources, with requests cpu 100m and memory
//     256Mi and a memory limit of 1Gi where unset; nodeSelector, tolerations
//     and serviceAccountName from spec.executor;
//   - hardened: runAsNonRoot as 65532:65532 with fsGroup 65532, the
//     RuntimeDefault seccomp profile, no privilege escalation, a read-only root
//     filesystem, every capability dropped, service links off, and
//     automountServiceAccountToken false; writable emptyDirs at /work (also
//     HOME and the working directory) and /tmp;
//   - command terrarun-executor --stage-file /etc/terrarun/stage/stage.json,
//     image spec.engine.image (or JobOptions.Image);
//   - terminationGracePeriodSeconds from JobOptions (30s): on deletion the pod
//     gets SIGTERM, which terrarun-executor forwards to terraform as SIGINT so
//     that it releases its state lock.
//
// # What the pod mounts
//
// Secret material is only ever in files, never in the environment or the
// arguments, and never in stage.json, which names the files instead:
//
//	/etc/terrarun/stage/stage.json    the stage.Spec   (stage Secret)
//	/etc/terrarun/stage/ca.crt        JobOptions.CABundle, to verify terrarun-apiserver
//	/var/run/secrets/terrarun/token   projected service-account token, audience
//	                                  JobOptions.Audience ("terrarun.dev"), 1h, pod-bound
//	/etc/terrarun/source/<file>       plan stage: inline files (from the stage Secret's
//	                                  src-<file> keys) or the keys of spec.source.configMap
//	/etc/terrarun/git/                plan stage: spec.source.git.credentialsSecret
//	/etc/terrarun/variables/var-secret-N/<variable>     variables from secretKeyRef
//	/etc/terrarun/variables/var-configmap-N/<variable>  variables from configMapKeyRef
//	/etc/terrarun/backend/backend.hcl spec.backend.configSecret, passed as -backend-config
//	/var/cache/terrarun/plugins       with JobOptions.PluginCache: the plugin cache of the
//	                                  run's creator, a PersistentVolumeClaim (plugincache.go)
//
// Files of Secret and ConfigMap volumes have mode 0440 and group 65532. They
// are symbolic links into the volume's ..data directory, as the kubelet makes
// them.
//
// # The default backend
//
// A run without spec.backend keeps its state in the backend terrarun serves
// (stage.ServedBackend, package statestore): the runner points the engine's
// http backend at a proxy on the pod's loopback interface that forwards to
// the run's state and statelock subresources with the stage's own
// credentials. The state is the run's workspace's in its namespace, in
// terrarun's etcd; the pod holds no Kubernetes API credential at all, and
// the executor's service account needs no RBAC.
//
// A run may name the kubernetes backend with in_cluster_config "true"
// instead; admission then requires spec.executor.serviceAccountName (a
// ServiceAccount its creator may run pods as), and for that run only the pod
// mounts, explicitly, a projected token with kube-apiserver's audience, the
// cluster CA (kube-root-ca.crt) and the namespace at
// /var/run/secrets/kubernetes.io/serviceaccount. Runs with any other backend
// hold no kube-apiserver credential.
//
// # Identity
//
// The executor authenticates to terrarun-apiserver with its projected token.
// IdentityResolver (an auth.Resolver) turns the authenticated user of such a
// token (system:serviceaccount:<ns>:<sa>, with the pod-name and pod-uid
// extras) back into the execution, checking the pod, its Job and the Job's
// owner; package executor/auth does it once per request.
package job
