// Package tekton is the Tekton executor (--executor=tekton): it runs each
// stage execution (one attempt of the plan or apply stage of a
// TerraformRun) as one Tekton Pipelines TaskRun (tekton.dev/v1) in the
// run's namespace, with the same executor image and the same stage contract
// as the Job executor, and maps the executor identity of a request back to
// that TaskRun.
//
// # The TaskRun
//
// The TaskRun is the Job executor's pod (package job builds it, and creates
// what it mounts: the stage and inputs Secrets, content-checked and never
// adopted when someone else made them, and the plugin cache's claim) in
// Tekton's form (buildTaskRun): the Job's name (<run>-<stage>-<attempt>),
// labels (terrarun.dev/run, run-uid, stage, attempt: Tekton Dashboard and
// Chains see the run), annotations and owner (the run); one step,
// "executor", that is the Job's container, with terrarun-executor's outcome
// as the result "outcome"; the Job's volumes; the pod's hardening, service
// account, node selector, tolerations and spread in podTemplate; and the
// stage's timeout. Tekton names its pod <taskrun>-pod (PodName), which is
// also the host name a state lock records.
//
// Tekton talks to terrarun through the dynamic client and Tekton's own JSON
// names: Tekton's Go module needs knative and an older Kubernetes than
// terrarun's. An existing TaskRun is read back strictly (decodeSpec): any
// field terrarun does not write (another step, a sidecar, stepSpecs, a
// workspace) makes it one terrarun did not build.
//
// # What differs from Jobs
//
//   - A stage never runs twice: Tekton starts a TaskRun's pod again when it
//     is gone before the TaskRun ended. The first pod of each stage attempt
//     that speaks to the server is recorded in terrarun's etcd (Claims), and
//     every other pod of the attempt is refused; Status reports the attempt
//     lost, and cancels its TaskRun, once its pod is gone or is not that
//     one, or its node is lost.
//   - Stop cancels the TaskRun (spec.status TaskRunCancelled) before it
//     deletes the pod with the stage's grace period; Tekton's own deletion
//     of a canceled TaskRun's pod uses the pod's (30s: a TaskRun cannot set
//     terminationGracePeriodSeconds).
//   - terrarun-executor is not PID 1 under Tekton's entrypoint, so its
//     outcome result is for Tekton's views only; Status never reads it.
//   - TaskRuns have no TTL: they go with their run (its ownerReference).
package tekton
