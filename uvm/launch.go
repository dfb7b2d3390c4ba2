package uvm

// launchJobs is how many copies a batch gathers before it queues them, so that the device
// copies the first blocks of a large batch while the CPU prepares the rest (a 64 MiB batch of
// 4 KiB blocks is 16,384 jobs). The first launches of a batch are smaller, firstLaunchJobs
// then twice as many each time up to launchJobs, so that the device starts sooner: nothing
// overlaps the preparation of the first launch (1024 jobs at about 25 ns each: 25 µs, where
// the kernel's 50 GB/s leaves a 64 MiB batch of 4 KiB blocks about 60 µs of slack to reach
// 48 GB/s, measured on an H100), and a 128-job launch is 10 µs of copying there, time enough
// for the CPU to prepare the next 256 jobs.
const (
	launchJobs      = 1024
	firstLaunchJobs = 128
)
