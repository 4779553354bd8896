package mysql

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
)

// wkb turns MySQL's internal geometry value (a little-endian 4-byte SRID,
// then the WKB), which the binlog and SELECT both carry, into WKB. An
// SRID other than 0 is kept the way PostGIS does (EWKB: the type word's
// 0x20000000 flag, the SRID after it), so no value loses its reference
// system; GEOS, Shapely and PostGIS read both forms.
func wkb(b []byte) ([]byte, error) {
	if len(b) < 4+5 {
		return nil, errors.New("geometry value shorter than SRID and WKB header")
	}
	srid := binary.LittleEndian.Uint32(b[:4])
	w := b[4:]
	if srid == 0 {
		return append([]byte{}, w...), nil
	}
	var order interface {
		binary.ByteOrder
		binary.AppendByteOrder
	}
	switch w[0] {
	case 0:
		order = binary.BigEndian
	case 1:
		order = binary.LittleEndian
	default:
		return nil, errors.New("geometry value has no WKB byte order")
	}
	out := make([]byte, 0, len(w)+4)
	out = append(out, w[0])
	out = order.AppendUint32(out, order.Uint32(w[1:5])|0x20000000)
	out = order.AppendUint32(out, srid)
	return append(out, w[5:]...), nil
}

// uuidText prints MariaDB's uuid (16 bytes in the binlog) as SELECT does.
func uuidText(b []byte) (string, error) {
	if len(b) != 16 {
		return "", errMalformed
	}
	var buf [36]byte
	hex.Encode(buf[0:8], b[0:4])
	buf[8] = '-'
	hex.Encode(buf[9:13], b[4:6])
	buf[13] = '-'
	hex.Encode(buf[14:18], b[6:8])
	buf[18] = '-'
	hex.Encode(buf[19:23], b[8:10])
	buf[23] = '-'
	hex.Encode(buf[24:], b[10:])
	return string(buf[:]), nil
}

// inet6Text prints MariaDB's inet6 (16 bytes) as SELECT does, which is
// MySQL's INET6_NTOA: lower-case hex words without leading zeros, the
// first longest run of zero words (even a single one) as "::", and the
// IPv4-compatible (::a.b.c.d) and IPv4-mapped (::ffff:a.b.c.d) forms.
func inet6Text(b []byte) (string, error) {
	if len(b) != 16 {
		return "", errMalformed
	}
	var w [8]uint16
	for i := range w {
		w[i] = binary.BigEndian.Uint16(b[2*i:])
	}
	gapPos, gapLen := -1, 0
	for i := 0; i < 8; {
		if w[i] != 0 {
			i++
			continue
		}
		j := i
		for j < 8 && w[j] == 0 {
			j++
		}
		if j-i > gapLen {
			gapPos, gapLen = i, j-i
		}
		i = j
	}
	var sb strings.Builder
	for i := 0; i < 8; i++ {
		switch {
		case i == gapPos:
			if i == 0 {
				sb.WriteByte(':')
			}
			sb.WriteByte(':')
			i += gapLen - 1
		case i == 6 && gapPos == 0 && (gapLen == 6 || (gapLen == 5 && w[5] == 0xffff)):
			for k := 12; k < 16; k++ {
				if k > 12 {
					sb.WriteByte('.')
				}
				sb.WriteString(strconv.Itoa(int(b[k])))
			}
			return sb.String(), nil
		default:
			sb.WriteString(strconv.FormatUint(uint64(w[i]), 16))
			if i != 7 {
				sb.WriteByte(':')
			}
		}
	}
	return sb.String(), nil
}
