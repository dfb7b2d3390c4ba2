module github.com/pinmalloc/pinmalloc/debugpage

go 1.24.0

require github.com/pinmalloc/pinmalloc v0.0.0

require golang.org/x/sys v0.41.0 // indirect

replace github.com/pinmalloc/pinmalloc => ../
