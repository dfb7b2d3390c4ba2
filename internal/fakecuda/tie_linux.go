package fakecuda

import (
	"os/exec"
	"runtime"
	"syscall"
)

// runTied runs cmd to its end with run (cmd.Run, cmd.CombinedOutput, ...) as a child that dies
// with this process: it gets SIGKILL when the thread that started it ends (PR_SET_PDEATHSIG),
// and that thread is kept for this goroutine until run returns, so that a program killed
// outright (at a command's time limit) leaves no child on the fake running on.
func runTied(cmd *exec.Cmd, run func() error) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return run()
}
