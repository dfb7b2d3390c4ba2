package remote

// connTag is the number a connection's name shows for its id: 32 bits of a mix of the id, the
// same on both sides (a dialer's name of its connection and the dialed worker's name of it end
// alike), so that two connections between one pair of workers read apart in logs. It is not
// the id: the id is what a peer's messages name to reach the connection, and a name travels
// (logs, errors) where the id must not.
func connTag(id uint64) uint32 {
	id ^= id >> 31
	id *= 0x7fb5d329728ea185
	id ^= id >> 27
	id *= 0x81dadef4bc2dd44d
	return uint32((id ^ id>>33) >> 32)
}
