package ipcpool

import (
	"os"
	"strconv"
	"strings"
)

// startTime returns the start time of process pid in clock ticks since boot (field 22 of
// /proc/pid/stat), or 0 when it cannot be read: with the pid, it names one process, not a
// later one that reused the pid.
func startTime(pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command may hold spaces and parentheses
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v
}
