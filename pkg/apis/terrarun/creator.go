package terrarun

import (
	"slices"

	"k8s.io/apiserver/pkg/authentication/user"
)

// CreatesOnBehalf reports whether u is the server itself (its loopback
// client: user system:apiserver in group system:masters), which creates
// the runs of a workspace with the workspace's creator as theirs. Every
// other user is the creator of the runs it creates.
func CreatesOnBehalf(u user.Info) bool {
	return u != nil && u.GetName() == user.APIServerUser && slices.Contains(u.GetGroups(), user.SystemPrivilegedGroup)
}

// User returns the creator as a user, for authorization checks.
func (c *Creator) User() user.Info {
	return &user.DefaultInfo{Name: c.Username, UID: c.UID, Groups: slices.Clone(c.Groups)}
}
