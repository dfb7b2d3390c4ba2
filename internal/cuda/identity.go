package cuda

// FakeDriverSymbol is the C symbol that pinmalloc's fake driver (internal/fakecuda) exports and
// no CUDA driver does; its value is the hash of the source the library was built from. A program
// tells the fake from a GPU by it (IsFake), never by the name the fake gives its devices, which a
// test may set to a real GPU's.
const FakeDriverSymbol = "pinmalloc_fake_driver"

// Exports reports whether the driver library Load opened exports the C symbol name (dlsym in that
// library, not cuGetProcAddress). The error is Load's.
func Exports(name string) (bool, error) {
	dr, err := loadDriver()
	if err != nil {
		return false, err
	}
	return dr.exports(name), nil
}

// LoadedIsFake reports whether the driver library Load opened is pinmalloc's fake (as
// Device.IsFake says), before any device is opened. The error is Load's.
func LoadedIsFake() (bool, error) {
	dr, err := loadDriver()
	if err != nil {
		return false, err
	}
	return dr.exports(FakeDriverSymbol) || dr.exports(fakeControlSymbol), nil
}

// Exports reports whether the library the device's driver came from exports the C symbol name.
func (d *Device) Exports(name string) bool { return d.drv.exports(name) }

// fakeControlSymbol is the C function every build of pinmalloc's fake driver has exported, from
// before it had FakeDriverSymbol: an older fake is known by it.
const fakeControlSymbol = "fake_ctl"

// IsFake reports whether the device belongs to pinmalloc's fake driver, whatever the device is
// called and whichever source the fake was built from: its library exports FakeDriverSymbol or,
// built before that symbol, the fake's controls (fake_ctl), which no CUDA driver exports.
func (d *Device) IsFake() bool { return d.Exports(FakeDriverSymbol) || d.Exports(fakeControlSymbol) }
