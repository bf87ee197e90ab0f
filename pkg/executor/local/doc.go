// Package local is the local executor: it runs each stage of a TerraformRun as
// a child process of terrarun-apiserver (`terrarun-executor --stage-file FILE`),
// in a sandbox of its own. It is the default executor in standalone mode and
// in tests.
//
// # One execution per run, stage and attempt
//
// Every execution is named deterministically, <namespace>.<run>.<stage>.<attempt>,
// and recorded in etcd under <EtcdPrefix><namespace>/<run>/<uid>/<stage>/<attempt>
// with a create-if-absent transaction before anything is started. Whoever
// creates the record starts the process; everybody else (a second Start, another
// replica, a restarted server) only adopts the name, so a stage attempt is
// never executed twice. When the process ends, its final state (exit code,
// reason, completion time and the tail of its output) is written to the same
// record.
//
// A process belongs to the server instance that started it. It is started
// with Pdeathsig, so it receives SIGTERM when that server dies, and
// terrarun-executor forwards it to terraform, which releases its state lock.
// A record still marked Running that no live process of this instance owns is
// reported as StateUnknown with reason ExecutorLost: its outcome is unknown,
// and the run controller decides (a plan is retried, an apply is failed and
// never applied again). Because of this, with several replicas only the
// instance that started an execution can observe or stop it; the run
// controller runs on the elected leader only.
//
// A stage is also bounded by the run's spec.timeouts (plan or apply, 1h when
// unset): past it, the process is stopped as by Stop and ends with reason
// DeadlineExceeded, as a Job with activeDeadlineSeconds would.
//
// # Work directories and secrets
//
// Each execution gets a private (0700) work directory,
// <WorkRoot>/<namespace>/<run>/<uid>/<stage>-<attempt>, which is also the child's
// working directory and HOME:
//
//	stage.json        the stage.Spec (0600)
//	token             the per-stage bearer token (0600; hidden from the stage)
//	source/           inline or ConfigMap configuration files (plan stage)
//	variables/NAME    values of variables from Secrets and ConfigMaps (0600)
//	git-credentials/  username, password, identity, known_hosts from credentialsSecret (0600)
//	backend.hcl       the "backend.hcl" key of the backend's configSecret (0600)
//	work/             the executor's scratch directory (stage.Spec.WorkDir)
//	tmp/              TMPDIR, seen at /.terrarun-tmp in the sandbox: a short path for plugin sockets
//	                  (unsandboxed stages get a random terrarun-stage-* directory in os.TempDir() instead)
//
// Secrets reach the child only as these files: never in its arguments or
// environment. The environment is minimal: PATH (from Options.Env, else the
// server's), HOME, TMPDIR and Options.Env. When the process ends, the whole
// work directory is removed. The child's stdout and stderr reach the server
// through a pipe it made, never a file in the work directory; their last
// 2 KiB (with known secret values masked) are kept in the status message of
// a failed execution. The
// directories of a server that was killed before its processes ended are
// removed by the next one, 30 seconds after its Run starts (when those
// processes, told to stop through Pdeathsig, have ended).
//
// # Sandbox
//
// Unless SandboxOptions.Disabled, each stage runs through package sandbox,
// with terrarun-executor as its init: in mount, PID and IPC namespaces of its own,
// as SandboxOptions.UID:GID when the server runs as root (never root itself),
// else as the server's user in a user namespace. It sees the system (/usr,
// /etc, ...), the directories on its PATH (so the engine), terrarun-executor,
// the CA certificate and SandboxOptions.Mounts read-only; its own work
// directory and its namespace's state directory, <StateRoot>/<namespace>,
// read-write (both are handed to the stage's user); and nothing else of the
// work, state and values roots, of the CA's directory (the server's keys) or
// of SandboxOptions.Hidden (the data directory: etcd's data, the admin
// kubeconfig). It has a private /tmp and /dev and no capabilities. When the
// stage's terrarun-executor ends, init ends and the kernel kills every other
// process of the PID namespace: a daemon started with setsid by a local-exec
// provisioner does not outlive its stage. New checks at start-up that the
// sandbox can be built and that its user can run terrarun-executor.
//
// The sandbox shares the host's network and kernel: a stage reaches what the
// host reaches, and its resource use is not limited. That is the difference
// from Kubernetes mode, and why the local executor is for standalone mode.
//
// # Identity
//
// Each execution gets a random 256-bit bearer token from the executor's
// Tokens, valid until the process ends. Tokens authenticates it as
// system:terrarun:executor:<namespace>:<run> in the group
// system:terrarun:executors, with the run's UID, stage, attempt and the sha256
// of the token in the user's extra fields, and resolves that user back to an
// executor.Identity only while that hash is the identity's current token's.
//
// The token reaches terrarun-executor as descriptor 3 (stage.Spec.TokenFD),
// read once and closed; in a sandbox, the token file is covered by an empty
// file, and terrarun-executor makes itself undumpable, so that terraform and
// the processes it starts, which run as the same user, can read the token
// neither from the file nor through /proc.
//
// # Values: Secrets and ConfigMaps in standalone mode
//
// Standalone mode has no cluster, so Secrets and ConfigMaps are files:
// <ValuesRoot>/<namespace>/secrets/<name>/<key> and
// <ValuesRoot>/<namespace>/configmaps/<name>/<key>. A server connected to a
// cluster passes its own ValueSource instead.
//
// # Default backend: local state per namespace and workspace
//
// When a run sets no spec.backend, state is kept by Terraform's "local" backend
// on the server host, one state per namespace and workspace:
//
//	<StateRoot>/<namespace>/<workspace>/terraform.tfstate
//
// (path for the default workspace, workspace_dir=<StateRoot>/<namespace> for
// the others, which yields the same layout). All runs of a namespace that use
// the same workspace share that state, whatever their configuration, and
// Terraform's file lock serializes them. A spec.backend of type "local" without
// path or workspace_dir gets the same defaults, since a relative path would
// land in the work directory, which is removed after each stage.
package local
