// +k8s:deepcopy-gen=package
// +groupName=terrarun.dev

// Package terrarun holds the internal (hub) version of the terrarun.dev API.
// Every served version converts to and from these types.
package terrarun
