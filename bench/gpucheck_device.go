package main

// The GPU check's device step (gpucheck.go): device 0 opened, described and its capabilities
// probed, within a limit, so that a driver that hangs in a call ends the run with its reason.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"

	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
)

// errDriverHangs is the device step's error when the driver does not answer within its limit.
var errDriverHangs = errors.New("the CUDA driver did not answer")

// deviceLimit is the longest the device step may take: a quarter of the deadline, 2 minutes at
// most (cuInit on a machine of eight GPUs without persistence mode takes seconds, nvidia-smi is
// given 30).
func (c *check) deviceLimit() time.Duration { return min(2*time.Minute, c.cfg.deadline/4) }

// described is what the device step found.
type described struct {
	info   deviceInfo
	caps   map[string]capability
	detail string
	err    error
}

// deviceStep describes device 0 within deviceLimit. A driver that hangs in a call (cuInit on a
// GPU in a bad state, a primary context that never comes) fails the step: the call cannot be
// stopped, so it is left where it is, the run goes on to its report and the process ends it.
func (c *check) deviceStep() (string, error) {
	limit := c.deviceLimit()
	done := make(chan described, 1)
	go func() { done <- describeDevice(c.log) }()
	select {
	case d := <-done:
		if d.err != nil {
			return "", d.err
		}
		c.Device, c.fake, c.caps = d.info, d.info.Fake, d.caps
		c.name = c.cfg.name
		if c.name == "" {
			c.name = fileName(d.info.Name)
			if c.fake {
				c.name = "fake-driver"
			}
			if c.cfg.quick {
				c.name += "-quick"
			}
		}
		return d.detail, nil
	case <-time.After(limit):
		return "", fmt.Errorf("%w within %v: a call into it (%s) hangs; a GPU in a bad state? (nvidia-smi -q, dmesg)", errDriverHangs, limit, driverName())
	}
}

// describeDevice opens device 0, describes it and finds the capabilities it lacks. It touches
// nothing of the check's but log, which is safe to write from two goroutines, so that a call
// that hangs in it can be left behind.
func describeDevice(log io.Writer) (out described) {
	dev, err := icuda.Open(0)
	if err != nil {
		out.err = err
		return out
	}
	defer dev.Close()
	d := &out.info
	if d.Name, err = dev.Name(); err != nil {
		out.err = err
		return out
	}
	d.Fake = dev.IsFake()
	if !d.Fake && len(nvidiaDeviceNodes(devDir)) == 0 {
		out.err = fmt.Errorf("%w: the driver %s, its device %q is no GPU (a fake driver of another source?), and nothing it measures is a GPU figure",
			errDriverWithoutGPU, driverName(), d.Name)
		return out
	}
	if n, err := dev.TotalMem(); err == nil {
		d.TotalMem = uint64(n)
	}
	major, _ := dev.Attribute(icuda.AttrComputeCapabilityMajor)
	minor, _ := dev.Attribute(icuda.AttrComputeCapabilityMinor)
	d.Compute = fmt.Sprintf("%d.%d", major, minor)
	d.Multiprocessors, _ = dev.Attribute(icuda.AttrMultiprocessorCount)
	if v, err := icuda.DriverVersion(); err == nil {
		d.CUDA = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	smi := exec.CommandContext(ctx, "nvidia-smi", "--query-gpu=name,driver_version,memory.total,pci.bus_id", "--format=csv,noheader", "-i", "0")
	if b, err := smi.Output(); err == nil {
		d.NvidiaSMI = strings.TrimSpace(string(b))
	}
	if !d.Fake {
		d.NVML = describeNVML(d.Name)
	}
	out.caps = probeCapabilities(dev, d.NVML)
	if d.Fake {
		fmt.Fprintf(log, "gpucheck: %s\n", fakeNote)
	}
	out.detail = fmt.Sprintf("%s, %.1f GiB, compute capability %s, %d multiprocessors, CUDA driver API %s%s",
		d.Name, float64(d.TotalMem)/(1<<30), d.Compute, d.Multiprocessors, d.CUDA, map[bool]string{true: "; " + fakeNote}[d.Fake])
	return out
}
