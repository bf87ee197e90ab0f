// Package deploy holds terrarun's deploy manifests. RBAC is rbac.yaml, so that
// standalone mode evaluates the same roles as a cluster does.
package deploy

import _ "embed"

// RBAC is rbac.yaml: the server's ClusterRoles and the users' roles
// terrarun-view, terrarun-edit and terrarun-approve.
//
//go:embed rbac.yaml
var RBAC []byte
