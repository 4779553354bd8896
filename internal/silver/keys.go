package silver

import (
	"hash/maphash"
	"slices"
	"strings"
	"unsafe"
)

// keyIndex is the set of keys a merge touches. The encodings (encodeKey)
// live in one arena, and an open-addressing table of their hashes finds
// them, so adding a key allocates nothing of its own and costs one probe; a
// key's changes are in one slice shared by every key (group).
type keyIndex struct {
	seed  maphash.Seed
	slots []int32 // 0: empty; else 1 + an index into all
	all   []keyed
	arena []byte // the current chunk; full chunks stay alive through the strings over them
}

// arenaChunk is the size of an arena chunk (a larger encoding gets its own).
const arenaChunk = 256 << 10

func (x *keyIndex) len() int { return len(x.all) }

// reserve makes room for n keys.
func (x *keyIndex) reserve(n int) {
	if n > len(x.all) {
		x.all = slices.Grow(x.all, n-len(x.all))
		x.rehash(n)
	}
}

// rehash sizes the table for n keys (load at most 1/2) and reinserts them.
func (x *keyIndex) rehash(n int) {
	size := 16
	for size < 2*n {
		size *= 2
	}
	if size <= len(x.slots) {
		return
	}
	if x.slots == nil {
		x.seed = maphash.MakeSeed()
	}
	x.slots = make([]int32, size)
	mask := uint64(size - 1)
	for i := range x.all {
		for s := x.all[i].hash & mask; ; s = (s + 1) & mask {
			if x.slots[s] == 0 {
				x.slots[s] = int32(i + 1)
				break
			}
		}
	}
}

// find returns the slot of enc (hashing to h): its key's, or the empty one
// where it goes.
func (x *keyIndex) find(enc []byte, h uint64) uint64 {
	mask := uint64(len(x.slots) - 1)
	for s := h & mask; ; s = (s + 1) & mask {
		i := x.slots[s]
		if i == 0 {
			return s
		}
		if k := &x.all[i-1]; k.hash == h && k.enc == string(enc) {
			return s
		}
	}
}

// get returns the key encoded as enc, if touched. The pointer is valid until
// the next add.
func (x *keyIndex) get(enc []byte) (*keyed, bool) {
	if len(x.slots) == 0 {
		return nil, false
	}
	s := x.find(enc, maphash.Bytes(x.seed, enc))
	if x.slots[s] == 0 {
		return nil, false
	}
	return &x.all[x.slots[s]-1], true
}

// add returns the index of the key encoded as enc, adding it if new.
func (x *keyIndex) add(enc []byte) (i int32, added bool) {
	if 2*(len(x.all)+1) > len(x.slots) {
		x.rehash(max(len(x.all)+1, 2*len(x.all)))
	}
	h := maphash.Bytes(x.seed, enc)
	s := x.find(enc, h)
	if x.slots[s] != 0 {
		return x.slots[s] - 1, false
	}
	if cap(x.arena)-len(x.arena) < len(enc) {
		x.arena = make([]byte, 0, max(arenaChunk, len(enc)))
	}
	start := len(x.arena)
	x.arena = append(x.arena, enc...)
	str := ""
	if len(enc) > 0 {
		str = unsafe.String(&x.arena[start], len(enc))
	}
	i = int32(len(x.all))
	x.all = append(x.all, keyed{enc: str, hash: h})
	x.slots[s] = i + 1
	return i, true
}

// group sorts the touched keys by encoding (the table's sort order, into
// in.order) and gives each key its changes, in the order they were read,
// as one slice of a shared array. Idempotent.
func (in *input) group() {
	if in.grouped {
		return
	}
	in.grouped = true
	all := in.keys.all
	order := make([]int32, len(all))
	for i := range order {
		order[i] = int32(i)
	}
	// Snapshot chunks are read in key order: check before sorting.
	cmp := func(a, b int32) int { return strings.Compare(all[a].enc, all[b].enc) }
	if !slices.IsSortedFunc(order, cmp) {
		slices.SortFunc(order, cmp)
	}
	in.order = order
	if len(in.chs) == 0 {
		return
	}
	// Counting sort of the changes by their key's rank.
	start := make([]int32, len(all)+1)
	for _, c := range in.chs {
		start[c.key+1]++
	}
	rank := make([]int32, len(all)) // key -> its first slot
	n := int32(0)
	for _, k := range order {
		rank[k] = n
		n += start[k+1]
	}
	out := make([]change, len(in.chs))
	next := slices.Clone(rank)
	for _, c := range in.chs {
		out[next[c.key]] = c
		next[c.key]++
	}
	for k := range all {
		all[k].changes = out[rank[k]:next[k]:next[k]]
	}
	in.chs = nil
}

// reserve makes room for the changes of about n bronze rows.
func (in *input) reserve(n int) {
	if n > 0 {
		in.keys.reserve(n)
		in.chs = slices.Grow(in.chs, n)
	}
}

// sorted returns the touched keys' indices in key order.
func (in *input) sorted() []int32 {
	in.group()
	return in.order
}
