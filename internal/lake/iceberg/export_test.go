package iceberg

// SetLiveKeysChunk makes ScanLiveKeys read row groups in chunks of n rows
// until restore is called.
func SetLiveKeysChunk(n int64) (restore func()) {
	old := liveKeysChunk
	liveKeysChunk = n
	return func() { liveKeysChunk = old }
}

// MatchKeys returns the indices of vals that hold one of keys, as
// ScanLiveKeys picks them.
func MatchKeys(keys, vals []int64) []int32 {
	p := &keyProbe{keys: keys}
	return p.match(vals, nil, nil)
}
