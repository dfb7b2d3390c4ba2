package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// proc is the coordinator's end of one of the other processes: this program again, in a role.
type proc struct {
	name  string
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Scanner
	ready []string // the fields of its READY line
	dead  bool
}

// start starts this program in the role env names, and waits for its READY line.
func start(name string, env ...string) (*proc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{name: name, cmd: cmd, in: in, out: bufio.NewScanner(out)}
	if !track(cmd.Process) {
		p.kill()
		return nil, fmt.Errorf("%s: interrupted", name)
	}
	line, err := p.line()
	if err != nil {
		p.kill()
		return nil, err
	}
	if p.ready = strings.Fields(line); len(p.ready) == 0 || p.ready[0] != "READY" {
		p.kill()
		return nil, fmt.Errorf("%s did not start: %s", name, line)
	}
	return p, nil
}

func (p *proc) line() (string, error) {
	if !p.out.Scan() {
		return "", fmt.Errorf("%s: no answer", p.name)
	}
	return p.out.Text(), nil
}

// do sends a command and returns the answer.
func (p *proc) do(format string, a ...any) (string, error) {
	if _, err := fmt.Fprintf(p.in, format+"\n", a...); err != nil {
		return "", fmt.Errorf("%s: %w", p.name, err)
	}
	return p.line()
}

// kill kills it (SIGKILL) and waits for it.
func (p *proc) kill() {
	if p.dead {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.cmd.Wait()
	p.dead = true
}

// quit closes its stdin and waits for it, killing it after a while.
func (p *proc) quit() error {
	if p.dead {
		return nil
	}
	p.in.Close()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		p.dead = true
		return err
	case <-time.After(10 * time.Second):
		p.kill()
		return errors.New(p.name + " did not stop")
	}
}
