package debugpage

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// stats.json names every key in snake_case, its own and those of the pools' and heaps' Stats
// and Usage, which are Go structs without JSON tags: snake walks them and gives each field its
// snake_case name (PeakInUse: peak_in_use), in the struct's order. A time.Duration is a number
// of nanoseconds under a name ending in _ns (CommitTime: commit_time_ns), an error its text
// (omitted when nil), an embedded struct's fields are the outer struct's, and a field with a
// json tag keeps the tag's name. Values that marshal themselves (json.Marshaler,
// encoding.TextMarshaler) are left to do so.

// object is a JSON object whose keys keep their order.
type object []member

type member struct {
	key string
	val any
}

// MarshalJSON writes the members in order.
func (o object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(m.key)
		b.Write(k)
		b.WriteByte(':')
		v, err := json.Marshal(m.val)
		if err != nil {
			return nil, err
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

var (
	durationType  = reflect.TypeFor[time.Duration]()
	errorType     = reflect.TypeFor[error]()
	marshalerType = reflect.TypeFor[json.Marshaler]()
	textType      = reflect.TypeFor[encoding.TextMarshaler]()
)

// snake returns v ready for encoding/json with snake_case keys.
func snake(v any) any { return snakeValue(reflect.ValueOf(v)) }

func snakeValue(v reflect.Value) any {
	if !v.IsValid() {
		return nil
	}
	t := v.Type()
	switch {
	case t == durationType:
		return v.Int()
	case t.Implements(errorType) && t.Kind() != reflect.Struct:
		if v.IsNil() {
			return nil
		}
		return v.Interface().(error).Error()
	case t.Implements(marshalerType) || t.Implements(textType):
		return v.Interface()
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return snakeValue(v.Elem())
	case reflect.Struct:
		var o object
		snakeFields(v, &o)
		return o
	case reflect.Slice, reflect.Array:
		if t.Kind() == reflect.Slice && v.IsNil() {
			return []any{}
		}
		out := make([]any, v.Len())
		for i := range out {
			out[i] = snakeValue(v.Index(i))
		}
		return out
	case reflect.Map:
		out := make(map[string]any, v.Len())
		it := v.MapRange()
		for it.Next() {
			out[mapKey(it.Key())] = snakeValue(it.Value())
		}
		return out
	}
	return v.Interface()
}

// mapKey returns the name encoding/json gives the map key k: a string as it is (its quotes
// and backslashes escaped once, when the object is encoded), a TextMarshaler's text, an
// integer's figure; anything else as fmt prints it.
func mapKey(k reflect.Value) string {
	if k.Kind() == reflect.String {
		return k.String()
	}
	if tm, ok := k.Interface().(encoding.TextMarshaler); ok {
		if k.Kind() == reflect.Pointer && k.IsNil() {
			return ""
		}
		if b, err := tm.MarshalText(); err == nil {
			return string(b)
		}
	}
	switch k.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(k.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.FormatUint(k.Uint(), 10)
	}
	return fmt.Sprint(k.Interface())
}

// snakeFields appends the exported fields of struct v to o, those of embedded structs inline.
func snakeFields(v reflect.Value, o *object) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		fv := v.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct && f.Tag.Get("json") == "" {
			snakeFields(fv, o) // its exported fields are promoted, even from an unexported type
			continue
		}
		if !f.IsExported() {
			continue
		}
		name, omitEmpty := "", false
		if tag, ok := f.Tag.Lookup("json"); ok {
			parts := strings.Split(tag, ",")
			if parts[0] == "-" {
				continue
			}
			name = parts[0]
			omitEmpty = strings.Contains(tag, ",omitempty")
		}
		if name == "" {
			name = snakeName(f.Name)
			if f.Type == durationType {
				name += "_ns"
			}
		}
		val := snakeValue(fv)
		if (omitEmpty || f.Type.Implements(errorType)) && (val == nil || fv.IsZero()) {
			continue
		}
		*o = append(*o, member{name, val})
	}
}

// snakeName turns a Go field name into snake_case: PeakInUse peak_in_use, HugeTLBFallbacks
// huge_tlb_fallbacks, CommitPerGiB commit_per_gib.
func snakeName(s string) string {
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		s = strings.ReplaceAll(s, u, u[:1]+strings.ToLower(u[1:]))
	}
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		if unicode.IsUpper(c) && i > 0 {
			prev := r[i-1]
			next := i+1 < len(r) && unicode.IsLower(r[i+1])
			if unicode.IsLower(prev) || unicode.IsDigit(prev) || (unicode.IsUpper(prev) && next) {
				b.WriteByte('_')
			}
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}
