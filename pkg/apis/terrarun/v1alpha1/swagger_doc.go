package v1alpha1

// SwaggerDoc methods describe the query parameters of the plan, logs and
// outputs subresources: the generic endpoint installer reads them when it
// lists the fields of a connect options type as parameters of the
// subresource's routes. They repeat the field comments, which the generated
// OpenAPI definitions carry; TestSwaggerDocMatchesOpenAPI keeps the two equal.

// SwaggerDoc describes the query parameters of the logs subresource.
func (TerraformRunLogOptions) SwaggerDoc() map[string]string {
	return map[string]string{
		"":           "TerraformRunLogOptions are the query options of the logs subresource. A GET reads the log of one stage attempt; a POST, allowed only to the executor of that attempt, appends its body to it.",
		"stage":      "stage is plan or apply. A GET defaults to the run's latest stage; a POST must set it.",
		"attempt":    "attempt is the attempt of the stage, from 1. A GET defaults to the stage's latest attempt; a POST must set it.",
		"follow":     "follow streams the log until the stage attempt ends (GET only).",
		"tailLines":  "tailLines, when set, starts with the last tailLines lines of the log (GET only).",
		"limitBytes": "limitBytes, when set, stops after limitBytes bytes (GET only).",
		"end":        "end, on a POST, makes the stream the whole log of the stage attempt: when its body ends cleanly, its last bytes and the log's end are one write, and followers end. A stream that breaks leaves the log open (the run controller ends it with the stage). POST only.",
	}
}

// SwaggerDoc describes the query parameters of the plan subresource.
func (TerraformRunPlanOptions) SwaggerDoc() map[string]string {
	return map[string]string{
		"":        "TerraformRunPlanOptions are the query options of the plan subresource. A GET reads the plan; a POST, allowed only to the executor of the run's current plan stage attempt, uploads one part of it.",
		"format":  "format is text (the default), json (redacted), file or source (GET only). file and source are served only to the executor of the run's apply stage.",
		"wait":    "wait blocks until the plan exists or the plan stage has ended without one (GET only).",
		"attempt": "attempt is the plan stage attempt that uploads; a POST must set it.",
		"part":    "part is the uploaded part: file, text, json, source, or result, which is uploaded last; or all, several of them in one multipart/form-data body. A POST must set it.",
	}
}

// SwaggerDoc describes the query parameters of the outputs subresource.
func (TerraformRunOutputsOptions) SwaggerDoc() map[string]string {
	return map[string]string{
		"":        "TerraformRunOutputsOptions are the query options of the outputs subresource. A GET takes none; a POST, allowed only to the executor of the run's current apply stage attempt, uploads the outputs.",
		"attempt": "attempt is the apply stage attempt that uploads; a POST must set it.",
	}
}

// SwaggerDoc describes the query parameters of the state and statelock
// subresources.
func (TerraformRunStateOptions) SwaggerDoc() map[string]string {
	return map[string]string{
		"":       "TerraformRunStateOptions are the query options of the state and statelock subresources, which only the executor of the run's current stage may use, when the run keeps its state in the backend terrarun serves. GET state reads the state, POST state writes a version of it, GET statelock reads its lock, POST statelock takes the lock and DELETE statelock releases it.",
		"lockID": "lockID is the ID of the state lock this stage holds: a POST of the state and a DELETE of the lock must set it.",
	}
}
