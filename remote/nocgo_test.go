//go:build !cgo

package remote

// cgoBuild is whether this test binary was built with cgo, and so loads UCX at run time.
const cgoBuild = false
