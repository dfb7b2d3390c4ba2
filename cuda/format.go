package cuda

import "fmt"

// How the handles print: fmt.Println(dev) names the device, a stream or event prints as one,
// and %x, %d and the other integer verbs still print the raw handle, as they did before the
// handles had a String.

// String names the device for logs and errors: "cuda device 0 (NVIDIA H100 80GB HBM3)", with
// "(closed)" after Close and "cuda device <none>" for a nil or zero Device. It asks the driver
// for the name, so it may take a driver call's time.
func (d *Device) String() string {
	in, err := d.in()
	if err != nil {
		return "cuda device <none>"
	}
	s := fmt.Sprintf("cuda device %d", in.Ordinal())
	if in.Closed() {
		return s + " (closed)"
	}
	if name, err := in.Name(); err == nil && name != "" {
		s += " (" + name + ")"
	}
	return s
}

// String formats the address in hexadecimal, as the driver's tools do: "0x7f3a00200000".
func (p DevicePtr) String() string { return fmt.Sprintf("%#x", uintptr(p)) }

// Format prints the address as String for %v and %s, and as an integer for the integer verbs
// (%x, %#x, %d...), flags and width included.
func (p DevicePtr) Format(f fmt.State, verb rune) { formatHandle(f, verb, uintptr(p), p.String) }

// String names the stream: "stream 0x55d1c3a0", and for the handles CUDA reserves "stream 0
// (legacy default)", "stream 1 (legacy)" (CU_STREAM_LEGACY) and "stream 2 (per-thread
// default)" (CU_STREAM_PER_THREAD).
func (s Stream) String() string {
	switch s {
	case 0:
		return "stream 0 (legacy default)"
	case 1:
		return "stream 1 (legacy)"
	case 2:
		return "stream 2 (per-thread default)"
	}
	return fmt.Sprintf("stream %#x", uintptr(s))
}

// Format prints the stream as String for %v and %s, and its handle as an integer for the
// integer verbs (%x, %#x, %d...), flags and width included.
func (s Stream) Format(f fmt.State, verb rune) { formatHandle(f, verb, uintptr(s), s.String) }

// String names the event: "event 0x55d1c3b0".
func (e Event) String() string { return fmt.Sprintf("event %#x", uintptr(e)) }

// Format prints the event as String for %v and %s, and its handle as an integer for the
// integer verbs (%x, %#x, %d...), flags and width included.
func (e Event) Format(f fmt.State, verb rune) { formatHandle(f, verb, uintptr(e), e.String) }

// formatHandle writes str() for %v and %s (and %q quoted), and v with the verb and flags
// otherwise.
func formatHandle(f fmt.State, verb rune, v uintptr, str func() string) {
	switch verb {
	case 'v', 's':
		if f.Flag('#') && verb == 'v' {
			fmt.Fprintf(f, "%#x", v)
			return
		}
		fmt.Fprintf(f, fmt.FormatString(f, 's'), str())
	case 'q':
		fmt.Fprintf(f, fmt.FormatString(f, 'q'), str())
	default:
		fmt.Fprintf(f, fmt.FormatString(f, verb), v)
	}
}
