// Package runtask is terrarun's side of run tasks (TerraformRunTask): the
// payload it sends, as HCP Terraform's run tasks send it (payload version
// 1), signed with the task's HMAC key; the per-call access token it mints;
// the task's answer through the taskresult subresource; and the
// authenticator and authorizer of that token.
//
// A call's token is valid only while the call is Running and before its
// deadline, as the run's status.tasks records them; the server stores only
// its hash. It authenticates a user that only this package creates, so no
// impersonation yields it, and that user may do two things only, on its own
// run: read the plan (text or redacted JSON; the plan file and source are
// the executors') and answer through the taskresult subresource.
package runtask
