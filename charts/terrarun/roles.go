// Package chart holds what Go reads of terrarun's Helm chart: its
// ClusterRoles, so that standalone mode evaluates the same roles as a cluster
// the chart is installed in.
package chart

import _ "embed"

// Roles is files/roles.yaml: the server's ClusterRole and the users' roles
// terrarun-view, terrarun-edit, terrarun-approve, terrarun-override and
// terrarun-policy-admin.
//
//go:embed files/roles.yaml
var Roles []byte
