package local

import (
	"fmt"
	"testing"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/executor"
	"github.com/terrarun/terrarun/pkg/executor/executortest"
)

// TestContract runs the executor contract (package executortest) against
// the local executor: real sandboxed child processes whose exit code and
// duration the run's variables set (the fake executor), and a lost stage
// one that a restarted server finds recorded.
func TestContract(t *testing.T) {
	executortest.Run(t, func(t *testing.T) executortest.Platform {
		v := newTestEnv(t)
		return executortest.Platform{
			New: func() executor.Executor { return v.executor() },
			Run: func(name string, code int32, long bool) *v1alpha1.TerraformRun {
				sleep := "0s"
				if long {
					sleep = "60s"
				}
				return newRun("contract", name, lit("fake_exit", fmt.Sprint(code)), lit("fake_sleep", sleep))
			},
			Lose: func(executor.Executor, executor.Execution) executor.Executor {
				return v.executor() // the server restarted, on the same records
			},
		}
	})
}
