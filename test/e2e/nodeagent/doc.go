// Package nodeagent is a small, TEST-ONLY node agent for the end-to-end
// tests: there is no container runtime on the machines that run them, so it
// stands in for the kubelet (and the scheduler) and runs the containers of
// pods (the executor Jobs' and terrarun's Deployment's) as local processes.
// It is used in-process by the e2e harness and must never be used outside
// tests: it runs as root, trusts every pod, and isolates nothing but mounts.
//
// # What it does
//
//   - Registers a Ready Node: capacity and allocatable cpu 2, memory 8Gi,
//     pods 110; one address, InternalIP = Options.Address (no Hostname
//     address: kube-apiserver prefers Hostname and the node name does not
//     resolve); status.daemonEndpoints.kubeletEndpoint.port = the kubelet
//     endpoint's port; nodeInfo with the Kubernetes version of the linked
//     client-go. It renews the Ready condition and its Lease
//     (kube-node-lease/<node>) every HeartbeatInterval (10s).
//   - Binds every pending pod with an empty spec.nodeName whose scheduler is
//     default-scheduler to itself (pods/binding): there is no scheduler.
//     nodeSelector, affinity, tolerations, taints and resource requests are
//     ignored, not honoured. Run a single agent per cluster, or run
//     kube-scheduler and set Options.Scheduled on each agent: it then runs
//     what the scheduler bound to its node.
//   - Runs each pod bound to it, under <RootDir>/<namespace>_<name>_<uid>/:
//     volumes in volumes/<volume>, each container's stdout and stderr in
//     <container>.log, its termination message in
//     <container>.termination-log.
//   - Reports the pod's status as the kubelet would, through UpdateStatus:
//     Pending (containers waiting, ContainerCreating) → Running (podIP and
//     hostIP = Address, containers running, started and ready) → Succeeded or
//     Failed (containers terminated with exitCode, reason Completed or Error,
//     startedAt, finishedAt, and the termination message). With
//     restartPolicy Always (a Deployment's pods), or OnFailure after a
//     failure, a container that exits runs again, as the kubelet does: at
//     once the first time, then after a back-off of 10s doubling up to 5
//     minutes (CrashLoopBackOff), with restartCount and lastState in the
//     status. Init containers (Tekton's TaskRun pods have one) run one
//     after the other, each to its end, before the containers, with
//     initContainerStatuses, the pod Pending and its containers waiting
//     (PodInitializing) meanwhile; one that fails fails the pod, and is
//     never retried. Pods with ephemeral or sidecar (restartPolicy) init
//     containers fail at once (UnsupportedPodSpec), as do pods with other
//     volumes (UnsupportedVolume).
//   - On deletion (deletionTimestamp), sends SIGTERM to each container's main
//     process, as a runtime signals a container's PID 1, then SIGKILL to its
//     process group after deletionGracePeriodSeconds (else
//     terminationGracePeriodSeconds, else 30s), marks the pod Failed if it had
//     not finished, deletes it for good with grace 0 (as the kubelet does once
//     its containers are gone) and removes its directory. A pod removed
//     without grace is killed at once. When Run's context ends, every
//     process is killed (pod directories are kept).
//   - Serves the kubelet endpoint on Address:Port over TLS: GET /healthz and
//     GET /containerLogs/{namespace}/{pod}/{container} with follow,
//     tailLines and limitBytes (timestamps and previous are ignored), which
//     is what `kubectl logs` reaches through kube-apiserver. With
//     ClientCAFile, containerLogs requires a client certificate that it
//     verifies (kube-apiserver's --kubelet-client-certificate).
//
// # Volumes
//
// emptyDir (a directory; medium Memory too), hostPath,
// persistentVolumeClaim (bound to a hostPath or local PersistentVolume,
// whose path is mounted; the pod waits until its claims are bound), secret,
// configMap, downwardAPI and projected (serviceAccountToken, secret,
// configMap, downwardAPI) volumes. Secret, configMap, downwardAPI and projected volumes
// are written as the kubelet's atomic writer does (files in a timestamped
// directory, ..data a symbolic link to it, top-level names symbolic links
// into ..data), with items or all keys, the item mode or defaultMode
// (default 0644); with fsGroup everything gets that group and files are made
// group-readable, and emptyDirs are 2777 with that group. Missing Secrets,
// ConfigMaps or keys keep the pod in ContainerCreating, retried every 2s,
// unless optional. A serviceAccountToken source is requested with
// TokenRequest for the pod's service account, with the projection's audience
// and expirationSeconds (default 3600), bound to the pod (boundObjectRef
// Pod, name, UID), and requested again at 80% of its lifetime while the pod
// runs. The downward API supports metadata.name, metadata.namespace,
// metadata.uid, metadata.labels and metadata.annotations (whole or ['key']);
// env's resourceFieldRef gives cpu and memory limits and requests as the
// kubelet does (a limit not set is the node's capacity). Secret and ConfigMap volumes are not updated when the
// objects change; downwardAPI volumes (and projected volumes of downwardAPI,
// Secret and ConfigMap sources) are written again when the pod's labels or
// annotations change while it runs, as the kubelet does: Tekton's
// entrypoint waits for its tekton.dev/ready annotation so.
//
// # Processes and mounts
//
// A container's command (command then args, $(VAR) expanded) is resolved
// so: command[0] is the image's binary when Options.Images maps the image
// (exact key, else same repository ignoring tag and digest, else same last
// path element, so that the key "terrarun-executor" or any
// ".../terrarun-executor:tag" key serves every ".../terrarun-executor" image)
// and command[0] (or its base name) is that binary's base name or the
// image's last path element; a container without a command runs the image's
// binary. When command[0] names that binary by an absolute path (the path
// it has in its image, such as Tekton's /ko-app/entrypoint, which copies
// itself from there), the binary is also mounted there, read-only. Otherwise a bare name is looked up in Options.PathDirs and then
// the agent's PATH, and an absolute path is used as it is. An image that maps
// to nothing is fine when the command is found (e.g. /bin/sh).
//
// The environment is PATH (PathDirs, then the agent's PATH), HOSTNAME (the
// pod name), KUBERNETES_SERVICE_HOST/PORT (and the KUBERNETES_PORT* family)
// pointing at the endpoint of the kubernetes Service's EndpointSlice (there
// is no kube-proxy to route its ClusterIP) unless Options.Env sets
// KUBERNETES_SERVICE_HOST, Options.Env, then envFrom and env (value,
// secretKeyRef, configMapKeyRef, fieldRef metadata.name, metadata.namespace,
// metadata.uid, metadata.labels['k'], metadata.annotations['k'],
// spec.nodeName, spec.serviceAccountName, status.podIP, status.hostIP), and
// HOME (default "/"). No service links.
//
// Volume mounts are at their container paths, e.g. /etc/terrarun/stage, so
// each container runs in a private mount namespace, and concurrent pods
// mounting the same path do not collide. No unshare or mount binary is
// needed: the agent starts /proc/self/exe with
// SysProcAttr.Unshareflags = CLONE_NEWNS (Go makes / recursively private in
// the child) and an environment variable naming a spec file; this package's
// init function turns that process into a helper that
//
//  1. mounts a tmpfs on DefaultStagingDir (/run/terrarun-nodeagent) and
//     bind-mounts there, before anything can be hidden, each volume (or
//     subPath) and, read-only, the image's binary and each PathDir (whole
//     when anyone may search it, else executable by executable, since only
//     a bind mount's own mode matters, not its parents');
//  2. bind-mounts the staged volumes at their container paths, parents
//     first, creating missing mount points (empty directories, e.g.
//     /etc/terrarun/stage, persist on the node's file system), remounts
//     readOnly mounts read-only, and unmounts the staged volumes (so a
//     read-only volume is not writable through the staging directory); the
//     termination log is bind-mounted at the terminationMessagePath
//     (/dev/termination-log) when a mount point can be made there;
//  3. sets no_new_privs when allowPrivilegeEscalation is false, takes on the
//     container's identity (runAsUser, runAsGroup, with fsGroup and
//     supplementalGroups as supplementary groups; root when unset, and
//     runAsNonRoot without runAsUser is an error), changes to workingDir (or
//     /), and executes the command.
//
// Staging is what lets an emptyDir at /work or /tmp hide neither the
// binaries (the repository lives under /work) nor the pod directories (tests
// keep them under /tmp). A failure before execve is reported to the agent on
// a close-on-exec pipe and becomes the container's terminated state with
// exit code 128 and reason StartError. The helper is this package's init, so
// any binary that links this package (the e2e test binary) can serve as it;
// New checks that private mount namespaces work, and fails clearly when not
// root or when unshare(CLONE_NEWNS) is refused.
//
// Each container has its own UTS namespace, with the pod's host name
// (spec.hostname, else its name), so that os.Hostname in a container names
// its pod, as in a real pod.
//
// Each container is its own process group and PID namespace, whose PID 1 is
// its command (as in a runtime's container: a process that handles no
// SIGTERM ignores it, and is killed after the grace period), and dies with
// the agent's process (Pdeathsig SIGKILL); when its main process exits, the
// kernel kills whatever is left in the container, in whatever process
// group (Tekton's entrypoint starts its step in one of its own).
// Containers share the node's network namespace (the harness's) and root
// file system (and /proc, which shows the node's PIDs):
// readOnlyRootFilesystem, capabilities, seccomp, resources, probes and
// lifecycle hooks are ignored.
package nodeagent
