package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/cuda/cudatest"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/nvml"
)

// errGPUWithoutDriver is chooseDriver's error on a machine with an NVIDIA GPU whose CUDA driver
// does not load.
var errGPUWithoutDriver = errors.New("an NVIDIA GPU is present but the CUDA driver does not load")

// errDriverWithoutGPU is the device step's error when a driver that is not pinmalloc's fake
// opens a device on a machine with no NVIDIA device node: no CUDA driver reaches a GPU but
// through one, so the library is some other fake, and its figures are no GPU's.
var errDriverWithoutGPU = errors.New("a CUDA driver that is not pinmalloc's fake opened a device, but this machine has no NVIDIA device node (/dev/nvidia*, /dev/dxg) through which a driver reaches a GPU")

// devDir is where the device nodes of a GPU are.
const devDir = "/dev"

// driverName says which library is the driver: the one cuda.LibraryEnv names, else the loader's
// libcuda.so.1.
func driverName() string {
	if lib := os.Getenv(cuda.LibraryEnv); lib != "" {
		return lib
	}
	return "libcuda.so.1 (the loader's search path, LD_LIBRARY_PATH=" + os.Getenv("LD_LIBRARY_PATH") + ")"
}

// chooseDriver decides where a suite that needs a driver runs (-gpucheck, -uvm, -commit):
//   - on the driver that loads (libcuda.so.1, or the library cuda.LibraryEnv names), a GPU's or
//     the fake's, as the library's symbols say (internal/cuda.Device.IsFake), never its name;
//   - on pinmalloc's fake driver, in a child process (cudatest.ExecOnFake) whose exit status it
//     returns with rerun set, when the fake is asked for (wantFake: -fake) or when no driver
//     loads and nothing says this machine has an NVIDIA GPU (gpuSigns);
//   - nowhere, with err saying why, when the library cuda.LibraryEnv names does not load, when
//     the fake is asked for while cuda.LibraryEnv names a real driver, or when no driver loads on
//     a machine with an NVIDIA GPU (errGPUWithoutDriver): a check run on the fake there would
//     pass without having measured the GPU.
//
// prefix begins the line it prints when it runs on the fake, note ends it (what the fake's
// figures are worth).
func chooseDriver(prefix, note string, wantFake bool) (code int, rerun bool, err error) {
	loadErr := icuda.Load()
	lib := os.Getenv(cuda.LibraryEnv)
	switch {
	case lib != "" && loadErr != nil:
		return 1, false, fmt.Errorf("the driver at %s=%s: %w", cuda.LibraryEnv, lib, loadErr)
	case lib != "":
		if fake, _ := icuda.LoadedIsFake(); wantFake && !fake {
			return 1, false, fmt.Errorf("-fake asks for pinmalloc's fake driver, but %s=%s is a real driver: unset it", cuda.LibraryEnv, lib)
		}
		return 0, false, nil
	case loadErr == nil && !wantFake:
		return 0, false, nil
	case loadErr != nil && !wantFake:
		if signs := gpuSigns(devDir, exec.LookPath, nvml.Default()); len(signs) > 0 {
			return 1, false, fmt.Errorf("%w (%s): %v; install the NVIDIA driver's libcuda.so.1 or name it with %s, or pass -fake to check the fake driver instead",
				errGPUWithoutDriver, strings.Join(signs, "; "), loadErr, cuda.LibraryEnv)
		}
		fmt.Fprintf(os.Stderr, "%s: no GPU (%v): running on pinmalloc's fake driver; %s\n", prefix, loadErr, note)
	default:
		fmt.Fprintf(os.Stderr, "%s: -fake: running on pinmalloc's fake driver; %s\n", prefix, note)
	}
	code, err = cudatest.ExecOnFake()
	if err != nil {
		return 1, false, err
	}
	return code, true, nil
}

// driverOrFake is chooseDriver for -uvm and -commit: it returns the exit status with rerun set
// when the run happened in a child or cannot happen (the reason printed).
func driverOrFake(prefix, note string, wantFake bool) (code int, rerun bool) {
	code, rerun, err := chooseDriver(prefix, note, wantFake)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", prefix, err)
		return 1, true
	}
	return code, rerun
}

// gpuSigns lists what says an NVIDIA GPU is on this machine, without its CUDA driver: a device
// node under devDir (/dev/nvidia0, /dev/nvidiactl, ...), an nvidia-smi program found by
// lookPath, an NVML library that loads (its Init answers anything but "library not found").
func gpuSigns(devDir string, lookPath func(string) (string, error), lib nvml.Library) []string {
	var signs []string
	nodes, _ := filepath.Glob(filepath.Join(devDir, "nvidia*"))
	sort.Strings(nodes)
	if len(nodes) > 0 {
		signs = append(signs, "device nodes "+strings.Join(nodes, ", "))
	}
	if p, err := lookPath("nvidia-smi"); err == nil {
		signs = append(signs, "nvidia-smi at "+p)
	}
	if lib != nil {
		switch r := lib.Init(); {
		case r == nvml.Success:
			lib.Shutdown()
			signs = append(signs, "NVML initializes")
		case r != nvml.ErrorLibraryNotFound:
			signs = append(signs, fmt.Sprintf("NVML loads (nvmlInit_v2: %v)", r))
		}
	}
	return signs
}

// nvidiaDeviceNodes lists the character devices in devDir through which a CUDA driver reaches an
// NVIDIA GPU: nvidiactl, nvidia0, ..., nvidia-uvm, and WSL's dxg. A file of such a name that is
// no character device is none.
func nvidiaDeviceNodes(devDir string) []string {
	var nodes []string
	for _, pattern := range []string{"nvidia*", "dxg"} {
		found, _ := filepath.Glob(filepath.Join(devDir, pattern))
		for _, n := range found {
			if info, err := os.Stat(n); err == nil && info.Mode()&os.ModeCharDevice != 0 {
				nodes = append(nodes, n)
			}
		}
	}
	sort.Strings(nodes)
	return nodes
}
