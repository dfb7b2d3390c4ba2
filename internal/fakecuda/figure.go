package fakecuda

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
)

// FigureTag begins the log line of Figure.
const FigureTag = "gpucheck figure:"

// Figure records a figure a GPU test measured and the target it must meet, at least limit (at
// most, with atMost): it logs "gpucheck figure: NAME VALUE UNIT >= LIMIT" (or <=), which the GPU
// check (scripts/gpucheck) reads from the test's output and grades as a target of its own, so
// that a GPU test's figure is graded, not only logged. A figure that is not a positive finite
// number is no measurement and fails the test.
func Figure(tb testing.TB, name string, value float64, unit string, atMost bool, limit float64) {
	tb.Helper()
	if !(value > 0) || math.IsInf(value, 0) || strings.ContainsAny(name+unit, " \t\n") {
		tb.Errorf("figure %q: %g %s is no measurement", name, value, unit)
		return
	}
	op := ">="
	if atMost {
		op = "<="
	}
	tb.Logf("%s %s %s %s %s %s", FigureTag, name, strconv.FormatFloat(value, 'g', 6, 64), unit, op, strconv.FormatFloat(limit, 'g', -1, 64))
}

// ParseFigure reads the figure a line logged by Figure holds (the line may begin with the test
// log's file and line).
func ParseFigure(line string) (name string, value float64, unit string, atMost bool, limit float64, err error) {
	i := strings.Index(line, FigureTag)
	if i < 0 {
		return "", 0, "", false, 0, fmt.Errorf("no %q in %q", FigureTag, line)
	}
	f := strings.Fields(line[i+len(FigureTag):])
	if len(f) != 5 || (f[3] != ">=" && f[3] != "<=") {
		return "", 0, "", false, 0, fmt.Errorf("figure line %q: want NAME VALUE UNIT >=|<= LIMIT", line)
	}
	if value, err = strconv.ParseFloat(f[1], 64); err == nil {
		limit, err = strconv.ParseFloat(f[4], 64)
	}
	if err != nil {
		return "", 0, "", false, 0, fmt.Errorf("figure line %q: %w", line, err)
	}
	return f[0], value, f[2], f[3] == "<=", limit, nil
}
