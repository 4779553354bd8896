package delta

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Deletion vectors (PROTOCOL.md, "Deletion Vectors", "Deletion Vector
// Format"): the rows of a data file that are deleted, as a RoaringBitmapArray
// (magic 1681511377, then a 64-bit RoaringBitmap in the portable format).
// This writer stores them inline in the log (storageType "i", Z85); it
// reads inline ones only (on-disk "u"/"p" ones are refused).

const dvMagic = 1681511377

// DeletionVector is an add or remove action's deletionVector descriptor.
type DeletionVector struct {
	StorageType    string `json:"storageType"`
	PathOrInlineDv string `json:"pathOrInlineDv"`
	Offset         *int32 `json:"offset,omitempty"`
	SizeInBytes    int32  `json:"sizeInBytes"`
	Cardinality    int64  `json:"cardinality"`
}

// parseDV returns an action's deletion vector, nil when it has none.
func parseDV(raw json.RawMessage) (*DeletionVector, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var dv DeletionVector
	if err := json.Unmarshal(raw, &dv); err != nil {
		return nil, fmt.Errorf("deletion vector: %w", err)
	}
	return &dv, nil
}

// rows returns the deleted row indexes, sorted.
func (dv *DeletionVector) rows() ([]uint64, error) {
	if dv.StorageType != "i" {
		return nil, fmt.Errorf("%w: deletion vector stored as %q (only inline ones are read)", ErrUnsupported, dv.StorageType)
	}
	b, err := z85Decode(dv.PathOrInlineDv)
	if err != nil {
		return nil, err
	}
	if int(dv.SizeInBytes) > len(b) {
		return nil, fmt.Errorf("deletion vector: %d bytes, sizeInBytes %d", len(b), dv.SizeInBytes)
	}
	rows, err := decodeRoaringArray(b[:dv.SizeInBytes])
	if err != nil {
		return nil, err
	}
	if int64(len(rows)) != dv.Cardinality {
		return nil, fmt.Errorf("deletion vector: %d rows, cardinality %d", len(rows), dv.Cardinality)
	}
	return rows, nil
}

// inlineDV returns the inline deletion vector of rows (sorted, unique).
func inlineDV(rows []uint64) DeletionVector {
	b := encodeRoaringArray(rows)
	return DeletionVector{StorageType: "i", PathOrInlineDv: z85Encode(b), SizeInBytes: int32(len(b)), Cardinality: int64(len(rows))}
}

func encodeRoaringArray(rows []uint64) []byte {
	out := binary.LittleEndian.AppendUint32(nil, dvMagic)
	type bucket struct {
		key  uint32
		vals []uint32
	}
	var buckets []bucket
	for _, r := range rows {
		k := uint32(r >> 32)
		if len(buckets) == 0 || buckets[len(buckets)-1].key != k {
			buckets = append(buckets, bucket{key: k})
		}
		b := &buckets[len(buckets)-1]
		b.vals = append(b.vals, uint32(r))
	}
	out = binary.LittleEndian.AppendUint64(out, uint64(len(buckets)))
	for _, b := range buckets {
		out = binary.LittleEndian.AppendUint32(out, b.key)
		out = append(out, encodeRoaring32(b.vals)...)
	}
	return out
}

// encodeRoaring32 serializes a 32-bit RoaringBitmap in the portable format
// without run containers (cookie 12346): array containers up to 4096
// values, bitmap containers above.
func encodeRoaring32(vals []uint32) []byte {
	type container struct {
		key  uint16
		vals []uint16
	}
	var cs []container
	for _, v := range vals {
		k := uint16(v >> 16)
		if len(cs) == 0 || cs[len(cs)-1].key != k {
			cs = append(cs, container{key: k})
		}
		c := &cs[len(cs)-1]
		c.vals = append(c.vals, uint16(v))
	}
	le := binary.LittleEndian
	out := le.AppendUint32(nil, 12346)
	out = le.AppendUint32(out, uint32(len(cs)))
	for _, c := range cs {
		out = le.AppendUint16(out, c.key)
		out = le.AppendUint16(out, uint16(len(c.vals)-1))
	}
	offset := uint32(len(out) + 4*len(cs))
	for _, c := range cs {
		out = le.AppendUint32(out, offset)
		if len(c.vals) <= 4096 {
			offset += uint32(2 * len(c.vals))
		} else {
			offset += 8192
		}
	}
	for _, c := range cs {
		if len(c.vals) <= 4096 {
			for _, v := range c.vals {
				out = le.AppendUint16(out, v)
			}
			continue
		}
		var words [1024]uint64
		for _, v := range c.vals {
			words[v/64] |= 1 << (v % 64)
		}
		for _, w := range words {
			out = le.AppendUint64(out, w)
		}
	}
	return out
}

var errDVFormat = errors.New("deletion vector: bad RoaringBitmapArray")

func decodeRoaringArray(b []byte) ([]uint64, error) {
	le := binary.LittleEndian
	if len(b) < 12 || le.Uint32(b) != dvMagic {
		return nil, errDVFormat
	}
	n := le.Uint64(b[4:])
	b = b[12:]
	var rows []uint64
	for i := uint64(0); i < n; i++ {
		if len(b) < 4 {
			return nil, errDVFormat
		}
		key := uint64(le.Uint32(b))
		vals, rest, err := decodeRoaring32(b[4:])
		if err != nil {
			return nil, err
		}
		for _, v := range vals {
			rows = append(rows, key<<32|uint64(v))
		}
		b = rest
	}
	return rows, nil
}

// decodeRoaring32 reads one 32-bit RoaringBitmap (portable format, with or
// without run containers) and returns its values and the bytes after it.
func decodeRoaring32(b []byte) ([]uint32, []byte, error) {
	le := binary.LittleEndian
	if len(b) < 8 {
		return nil, nil, errDVFormat
	}
	cookie := le.Uint32(b)
	var size int
	var runs []byte
	pos := 0
	switch {
	case cookie == 12346:
		size, pos = int(le.Uint32(b[4:])), 8
	case cookie&0xFFFF == 12347:
		size, pos = int(cookie>>16)+1, 4
		nb := (size + 7) / 8
		if len(b) < pos+nb {
			return nil, nil, errDVFormat
		}
		runs, pos = b[pos:pos+nb], pos+nb
	default:
		return nil, nil, errDVFormat
	}
	if len(b) < pos+4*size {
		return nil, nil, errDVFormat
	}
	keys := make([]uint16, size)
	cards := make([]int, size)
	for i := range size {
		keys[i] = le.Uint16(b[pos+4*i:])
		cards[i] = int(le.Uint16(b[pos+4*i+2:])) + 1
	}
	pos += 4 * size
	if runs == nil || size >= 4 {
		pos += 4 * size // offset header: containers are read in order
	}
	var vals []uint32
	for i := range size {
		hi := uint32(keys[i]) << 16
		isRun := runs != nil && runs[i/8]&(1<<(i%8)) != 0
		switch {
		case isRun:
			if len(b) < pos+2 {
				return nil, nil, errDVFormat
			}
			nr := int(le.Uint16(b[pos:]))
			pos += 2
			if len(b) < pos+4*nr {
				return nil, nil, errDVFormat
			}
			for r := range nr {
				start, length := uint32(le.Uint16(b[pos+4*r:])), uint32(le.Uint16(b[pos+4*r+2:]))
				for v := start; v <= start+length; v++ {
					vals = append(vals, hi|v)
				}
			}
			pos += 4 * nr
		case cards[i] <= 4096:
			if len(b) < pos+2*cards[i] {
				return nil, nil, errDVFormat
			}
			for j := range cards[i] {
				vals = append(vals, hi|uint32(le.Uint16(b[pos+2*j:])))
			}
			pos += 2 * cards[i]
		default:
			if len(b) < pos+8192 {
				return nil, nil, errDVFormat
			}
			for w := range 1024 {
				word := le.Uint64(b[pos+8*w:])
				for bit := range 64 {
					if word&(1<<bit) != 0 {
						vals = append(vals, hi|uint32(w*64+bit))
					}
				}
			}
			pos += 8192
		}
	}
	return vals, b[pos:], nil
}

const z85Alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"

// z85Encode encodes b (zero-padded to a multiple of 4) in Z85.
func z85Encode(b []byte) string {
	for len(b)%4 != 0 {
		b = append(slices.Clone(b), 0)
	}
	var sb strings.Builder
	for i := 0; i < len(b); i += 4 {
		v := binary.BigEndian.Uint32(b[i:])
		var chunk [5]byte
		for j := 4; j >= 0; j-- {
			chunk[j] = z85Alphabet[v%85]
			v /= 85
		}
		sb.Write(chunk[:])
	}
	return sb.String()
}

func z85Decode(s string) ([]byte, error) {
	if len(s)%5 != 0 {
		return nil, fmt.Errorf("deletion vector: Z85 string of %d characters", len(s))
	}
	out := make([]byte, 0, len(s)/5*4)
	for i := 0; i < len(s); i += 5 {
		var v uint64
		for j := range 5 {
			d := strings.IndexByte(z85Alphabet, s[i+j])
			if d < 0 {
				return nil, fmt.Errorf("deletion vector: bad Z85 character %q", s[i+j])
			}
			v = v*85 + uint64(d)
		}
		if v > 0xFFFFFFFF {
			return nil, errors.New("deletion vector: bad Z85 group")
		}
		out = binary.BigEndian.AppendUint32(out, uint32(v))
	}
	return out, nil
}
